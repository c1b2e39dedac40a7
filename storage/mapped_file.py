"""A file mapped shared into memory through one descriptor (index files).

Python's `mmap.mmap` duplicates the descriptor it is given and keeps the copy
until it is closed, so a file mapped with it and also written with pwrite holds
two descriptors. This maps with the C library's mmap through ctypes: the mapping
holds no descriptor, and the one this object owns serves pwrite, ftruncate and
fsync.

Contract:
- `buffer` is a ctypes byte array over the mapping (None while the length is 0,
  which cannot be mapped); struct.unpack_from / pack_into work on it directly.
  It must not be used after `remap` or `close`: the memory is gone (a fault, not
  an exception). The owner (index_file.IndexFile) guarantees that with its locks
  and pins.
- `remap(length)` maps the file afresh at a new length (after the owner changed
  the file's length with ftruncate through `fd`).
- `close()` unmaps and closes the descriptor; closing twice is harmless.
- Linux keeps a shared mapping and the file's pages coherent (one page cache):
  bytes written with pwrite are seen through the mapping, and fsync on the
  descriptor writes the pages stored through the mapping too.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import mmap
import os

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_munmap = _libc.munmap
_munmap.restype = ctypes.c_int
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FAILED = ctypes.c_void_p(-1).value


class MappedFile:
    __slots__ = ("path", "fd", "writable", "length", "buffer", "_address")

    def __init__(self, path: str, fd: int, length: int, writable: bool):
        """Map `length` bytes of the file open on `fd`; this object owns `fd` from now on."""
        self.path = path
        self.fd = fd
        self.writable = writable
        self.length = 0
        self.buffer: ctypes.Array[ctypes.c_char] | None = None
        self._address: int | None = None
        self._map(length)

    def _map(self, length: int) -> None:
        if length <= 0:
            return
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if self.writable else 0)
        address = _mmap(None, length, prot, mmap.MAP_SHARED, self.fd, 0)
        if address is None or address == MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap of {self.path} failed: {os.strerror(err)}")
        self._address = address
        self.length = length
        self.buffer = (ctypes.c_char * length).from_address(address)

    def _unmap(self) -> None:
        address, self._address = self._address, None
        self.buffer = None
        if address is not None:
            _munmap(address, self.length)
        self.length = 0

    def remap(self, length: int) -> None:
        """Map the file afresh at `length` bytes (the old mapping goes)."""
        self._unmap()
        self._map(length)

    def read(self, start: int, stop: int) -> bytes:
        """A copy of bytes [start, stop) of the mapping."""
        if self._address is None or stop <= start:
            return b""
        stop = min(stop, self.length)
        return ctypes.string_at(self._address + start, stop - start)

    def close(self) -> None:
        self._unmap()
        fd, self.fd = self.fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
