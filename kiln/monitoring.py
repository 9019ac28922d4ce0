"""``jax.monitoring``: a publish/subscribe hook for events and durations.

Code (libraries such as Flax/Orbax, or the user's) records events; registered listeners
receive them, in registration order. kiln itself records no events.
"""
from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "clear_event_listeners", "record_event", "record_event_duration_secs",
    "record_event_time_span", "record_scalar", "register_event_duration_secs_listener",
    "register_event_listener", "register_event_time_span_listener",
    "register_scalar_listener", "unregister_event_duration_listener",
    "unregister_event_listener", "unregister_event_time_span_listener",
    "unregister_scalar_listener",
]

_event_listeners: list[Callable] = []
_duration_listeners: list[Callable] = []
_time_span_listeners: list[Callable] = []
_scalar_listeners: list[Callable] = []


def record_event(event: str, **kwargs: str | int) -> None:
    """Send ``event`` (with metadata ``kwargs``) to every event listener."""
    for callback in list(_event_listeners):
        callback(event, **kwargs)


def record_event_duration_secs(event: str, duration: float, **kwargs: str | int) -> None:
    """Send ``event`` and its duration in seconds to every duration listener."""
    for callback in list(_duration_listeners):
        callback(event, duration, **kwargs)


def record_event_time_span(event: str, start_time: float, end_time: float,
                           **kwargs: str | int) -> None:
    """Send ``event`` and its start and end times to every time-span listener."""
    for callback in list(_time_span_listeners):
        callback(event, start_time, end_time, **kwargs)


def record_scalar(event: str, value: float | int, **kwargs: str | int) -> None:
    """Send a scalar measurement to every scalar listener."""
    for callback in list(_scalar_listeners):
        callback(event, value, **kwargs)


def register_event_listener(callback: Callable) -> None:
    """Call ``callback(event, **kwargs)`` on every :func:`record_event`."""
    _event_listeners.append(callback)


def register_event_duration_secs_listener(callback: Callable) -> None:
    """Call ``callback(event, duration, **kwargs)`` on every
    :func:`record_event_duration_secs`."""
    _duration_listeners.append(callback)


def register_event_time_span_listener(callback: Callable) -> None:
    """Call ``callback(event, start, end, **kwargs)`` on every
    :func:`record_event_time_span`."""
    _time_span_listeners.append(callback)


def register_scalar_listener(callback: Callable) -> None:
    """Call ``callback(event, value, **kwargs)`` on every :func:`record_scalar`."""
    _scalar_listeners.append(callback)


def _unregister(listeners: list, callback: Callable) -> None:
    if callback not in listeners:
        raise AssertionError(f"{callback} is not a registered listener")
    listeners.remove(callback)


def unregister_event_listener(callback: Callable) -> None:
    """Remove an event listener."""
    _unregister(_event_listeners, callback)


def unregister_event_duration_listener(callback: Callable) -> None:
    """Remove a duration listener."""
    _unregister(_duration_listeners, callback)


def unregister_event_time_span_listener(callback: Callable) -> None:
    """Remove a time-span listener."""
    _unregister(_time_span_listeners, callback)


def unregister_scalar_listener(callback: Callable) -> None:
    """Remove a scalar listener."""
    _unregister(_scalar_listeners, callback)


def clear_event_listeners() -> None:
    """Remove every listener."""
    for listeners in (_event_listeners, _duration_listeners, _time_span_listeners,
                      _scalar_listeners):
        listeners.clear()
