"""A small convolutional network trained with plain SGD, written as a JAX program.

Only the imports differ from JAX: ``conv_general_dilated`` and ``reduce_window`` (max
pooling) come from ``kiln.lax``; ``grad``/``jit``/``vmap`` transform them like any other
function. Run: ``python examples/cnn.py`` (a few seconds; prints the loss falling).
"""
import kiln as jax
import kiln.numpy as jnp
from kiln import lax, random


def init(key):
    k1, k2, k3 = random.split(key, 3)
    return {
        "conv1": random.normal(k1, (3, 3, 1, 8)) * 0.3,      # HWIO
        "conv2": random.normal(k2, (3, 3, 8, 16)) * 0.1,
        "dense": random.normal(k3, (16, 2)) * 0.1,
    }


def conv(x, w, stride=1):
    return lax.conv_general_dilated(x, w, (stride, stride), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def max_pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def predict(params, images):
    x = jax.nn.relu(conv(images, params["conv1"]))
    x = max_pool(x)
    x = jax.nn.relu(conv(x, params["conv2"], stride=2))
    x = jnp.mean(x, axis=(1, 2))                              # global average pool
    return x @ params["dense"]


def loss(params, images, labels):
    logits = predict(params, images)
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * labels, axis=-1))


@jax.jit
def step(params, images, labels, lr=0.5):
    value, grads = jax.value_and_grad(loss)(params, images, labels)
    return value, jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


def data(key, n=64):
    """Images with a bright vertical (class 0) or horizontal (class 1) bar."""
    kc, kp, kn = random.split(key, 3)
    cls = random.bernoulli(kc, 0.5, (n,)).astype(jnp.int32)
    pos = random.randint(kp, (n,), 2, 10)
    idx = jnp.arange(12)
    vertical = (idx[None, None, :] == pos[:, None, None]) & jnp.ones((n, 12, 1), bool)
    horizontal = (idx[None, :, None] == pos[:, None, None]) & jnp.ones((n, 1, 12), bool)
    img = jnp.where(cls[:, None, None] == 0, vertical, horizontal).astype(jnp.float32)
    img = img + 0.1 * random.normal(kn, img.shape)
    return img[..., None], jax.nn.one_hot(cls, 2)


def main():
    key = random.PRNGKey(0)
    params = init(key)
    for i in range(60):
        images, labels = data(random.fold_in(key, i))
        value, params = step(params, images, labels)
        if i % 10 == 0 or i == 59:
            print(f"step {i:3d}  loss {float(value):.4f}")
    images, labels = data(random.PRNGKey(123), 256)
    acc = jnp.mean(jnp.argmax(predict(params, images), -1) == jnp.argmax(labels, -1))
    print(f"held-out accuracy {float(acc):.3f}")


if __name__ == "__main__":
    main()
