"""``jax._src.cloud_tpu_init``: whether this process runs on a Cloud TPU VM (never: kiln
runs on the host CPU)."""
running_in_cloud_tpu_vm: bool = False
