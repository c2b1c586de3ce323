"""Between safetensors dtype names and torch tensors (torch is imported lazily: the
CLI's everyday commands never pay its start-up cost)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mgit.errors import BadInputError

if TYPE_CHECKING:
    import torch

_NAMES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U64": "uint64",
    "U32": "uint32",
    "U16": "uint16",
    "U8": "uint8",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2": "float8_e5m2",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "F8_E8M0": "float8_e8m0fnu",
    "C64": "complex64",
}


def torch_dtype(name: str) -> torch.dtype:
    import torch

    attr = _NAMES.get(name)
    if attr is None or not hasattr(torch, attr):
        raise BadInputError(f"dtype {name} has no torch equivalent")
    dtype: torch.dtype = getattr(torch, attr)
    return dtype


def dtype_name(dtype: torch.dtype) -> str:
    import torch

    for name, attr in _NAMES.items():
        if getattr(torch, attr, None) == dtype:
            return name
    raise BadInputError(f"torch dtype {dtype} cannot be stored in safetensors")


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """The tensor's raw little-endian bytes (a CPU, contiguous copy only when needed)."""
    import torch

    t = t.detach().to("cpu").contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().data.cast("B")  # .data: memoryview(array)


def tensor_from_bytes(data: bytearray, dtype_str: str, shape: tuple[int, ...]) -> torch.Tensor:
    """A tensor over ``data`` (which it takes ownership of: no copy)."""
    import torch

    dtype = torch_dtype(dtype_str)
    if len(data) == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(data, dtype=dtype).reshape(shape)
