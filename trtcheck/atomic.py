"""Writing a file atomically: readers (a CI artifact upload, a browser on report.html) see the old file or
the new one, never half of one, and a write that fails part-way leaves nothing behind.

The data goes to a temporary file in the target's directory (same filesystem, so the rename is atomic),
which ``os.replace`` then moves over the target.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_write"]


def atomic_write(path: str | os.PathLike, data: bytes | str | Callable[[BinaryIO], object], encoding: str = "utf-8") -> Path:
    """Write ``data`` to ``path`` atomically and return ``path``.

    ``data`` is bytes, text (encoded with ``encoding``), or a callable writing into the binary file
    object it is given (``lambda f: torch.save(obj, f)``). The temporary file is created with mode 0o666
    less the umask, like a plain ``open(path, "w")``; on any error it is removed and the error re-raised,
    leaving an existing ``path`` untouched.
    """
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as file:
            if callable(data):
                data(file)
            else:
                file.write(data.encode(encoding) if isinstance(data, str) else data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
    return path
