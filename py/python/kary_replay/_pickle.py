"""Pickles of buffers: the files of a checkpoint, carried by the pickle (out of band with
protocol 5) and loaded back on the other side."""

import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

_T = TypeVar("_T")


def _scratch() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _checkpoint_files(save: Callable[[str], None], protocol: Any) -> dict[str, pickle.PickleBuffer | bytes]:
    """The files of a checkpoint that ``save(path)`` writes, as a pickle carries them (out of
    band with protocol 5)."""
    tmp = tempfile.mkdtemp(prefix="kary-replay-pickle-", dir=_scratch())
    try:
        path = os.path.join(tmp, "ckpt")
        save(path)
        files: dict[str, pickle.PickleBuffer | bytes] = {}
        for name in sorted(os.listdir(path)):
            with open(os.path.join(path, name), "rb") as f:
                data = f.read()
            files[name] = pickle.PickleBuffer(data) if protocol >= 5 else data
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return files


def _from_files(files: Mapping[str, Any], load: Callable[[str], _T]) -> _T:
    """``load(path)`` of the checkpoint whose files a pickle carried."""
    tmp = tempfile.mkdtemp(prefix="kary-replay-pickle-", dir=_scratch())
    try:
        path = os.path.join(tmp, "ckpt")
        os.mkdir(path)
        for name, data in files.items():
            with open(os.path.join(path, name), "wb") as f:
                f.write(memoryview(data))
        return load(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
