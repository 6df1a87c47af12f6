"""Fixtures shared by the test files."""

import signal
from collections.abc import Iterator

import pytest


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Python's own SIGINT handler for the test's length. A test command started in the
    background by a shell without job control runs with SIGINT ignored, and then
    ``_thread.interrupt_main`` raises nothing: a Ctrl-C test would wait forever."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
