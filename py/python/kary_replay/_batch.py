"""Samples as Python sees them: :class:`SampleInfo` and :class:`Batch`, and the checks of
``sample_into``'s destinations."""

from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from .errors import SchemaError

if TYPE_CHECKING:
    import torch

#: The concurrent buffer behind a :class:`PrioritizedReplayBuffer`.
Variant = Literal["split", "lockfree", "global"]
#: How a sample draws its targets.
Mode = Literal[
    "stratified", "independent", "without_replacement", "uniform", "fifo", "lifo", "shuffled", "max_heap", "min_heap"
]


class SampleInfo(dict[str, Any]):
    """What a sample returns besides the columns: ``keys`` (uint64, for
    :meth:`PrioritizedReplayBuffer.update_priorities`), ``indices`` (int64 slots),
    ``weights`` (float32 importance weights in (0, 1]), ``probabilities`` and ``priorities``
    (float64, the stored alpha-exponentiated priorities). A dict: entries are also
    attributes where no dict method has the name (``info.weights``; but ``info["keys"]``,
    as ``info.keys`` is the dict's method)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class Batch(SampleInfo):
    """A sampled batch: one new array ``(B, *shape)`` per column plus the entries of
    :class:`SampleInfo`. Nothing in it is reused by a later call."""

    def to_torch(
        self, device: "torch.device | str | None" = None, non_blocking: bool = False
    ) -> "dict[str, torch.Tensor]":
        """The batch as torch tensors (shared with the arrays on the CPU; copied to
        ``device`` otherwise). Keys become int64 (they are below 2^63)."""
        import torch

        out = {}
        for name, value in self.items():
            if name == "keys":
                value = value.astype(np.int64)
            t = torch.from_numpy(value)
            if device is not None:
                t = t.to(device, non_blocking=non_blocking)
            out[name] = t
        return out


def _as_out(name: str, value: Any) -> npt.NDArray[Any]:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "numpy") and hasattr(value, "device"):  # a torch tensor
        if value.device.type != "cpu":
            raise SchemaError(f"out['{name}']: a tensor on {value.device}: sample_into fills CPU memory")
        array: npt.NDArray[Any] = value.detach().numpy()
        return array
    raise SchemaError(f"out['{name}']: a numpy array or a torch CPU tensor, got {type(value).__name__}")
