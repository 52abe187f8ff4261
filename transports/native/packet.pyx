# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Per-packet mechanics of the transport cores, compiled: a data datagram packed, the
payload CRC and the interval sets (SACK ranges, received byte ranges).

Nothing here decides anything: loss detection, congestion control, path selection and
EV states stay Python (transports/core). ``datagram`` writes the header wire.py lays out
(``HEADER``) and copies the payload behind it in one call; ``crc32`` is zlib's CRC32 (the
wire's ``crc`` field) computed by ISA-L, ``crc32_range`` over part of a buffer without
slicing it; ``IntervalSet`` is the disjoint
half-open ranges transports/core/message.py documents, its ``starts`` and ``ends``
plain lists that Python code reads as before.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy


cdef extern from "isa-l/crc.h" nogil:
    uint32_t crc32_gzip_refl(uint32_t init_crc, const unsigned char *buf, uint64_t len)


def crc32(data) -> int:
    """zlib's CRC32 of ``data`` (any contiguous buffer), never 0: 0 means "no CRC"."""
    cdef Py_buffer view
    cdef uint32_t c
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        with nogil:
            c = crc32_gzip_refl(0, <const unsigned char *>view.buf, <uint64_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return c if c else 1


def crc32_raw(data) -> int:
    """zlib's CRC32 of ``data``, 0 included (to check against zlib.crc32)."""
    cdef Py_buffer view
    cdef uint32_t c
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        c = crc32_gzip_refl(0, <const unsigned char *>view.buf, <uint64_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return c


def crc32_range(data, Py_ssize_t offset, Py_ssize_t length) -> int:
    """``crc32(data[offset:offset + length])`` without the slice; ValueError if the range
    is not inside ``data``."""
    cdef Py_buffer view
    cdef uint32_t c
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if offset < 0 or length < 0 or offset + length > view.len:
            raise ValueError(f"range {offset}+{length} outside {view.len} bytes")
        with nogil:
            c = crc32_gzip_refl(0, <const unsigned char *>view.buf + offset, <uint64_t>length)
    finally:
        PyBuffer_Release(&view)
    return c if c else 1


cdef inline void _be16(unsigned char *p, uint16_t v) noexcept nogil:
    p[0] = v >> 8
    p[1] = v & 0xFF


cdef inline void _be32(unsigned char *p, uint32_t v) noexcept nogil:
    p[0] = v >> 24
    p[1] = (v >> 16) & 0xFF
    p[2] = (v >> 8) & 0xFF
    p[3] = v & 0xFF


cdef inline void _be64(unsigned char *p, uint64_t v) noexcept nogil:
    _be32(p, <uint32_t>(v >> 32))
    _be32(p + 4, <uint32_t>v)


def datagram(int version, int kind, int flags, uint32_t conn, uint32_t psn, uint32_t msg,
             uint32_t offset, uint32_t msg_len, int ev, uint64_t ts, uint64_t ts_echo,
             uint32_t crc, data, Py_ssize_t start, Py_ssize_t length) -> bytearray:
    """A new datagram: the header transports/core/wire.py lays out (``HEADER``, its
    ``length`` field ``length``) followed by ``data[start:start + length]``, packed and
    copied in one call (``data`` any contiguous buffer; ignored when ``length`` is 0)."""
    cdef Py_buffer view
    cdef unsigned char *p
    if not (0 <= version <= 0xFF and 0 <= kind <= 0xFF and 0 <= flags <= 0xFFFF
            and 0 <= ev <= 0xFFFF and 0 <= length <= 0xFFFF):
        raise OverflowError(f"header field out of range: version {version}, kind {kind}, "
                            f"flags {flags}, ev {ev}, length {length}")
    out = PyByteArray_FromStringAndSize(NULL, 48 + length)
    p = <unsigned char *>PyByteArray_AS_STRING(out)
    p[0] = <uint8_t>version
    p[1] = <uint8_t>kind
    _be16(p + 2, <uint16_t>flags)
    _be32(p + 4, conn)
    _be32(p + 8, psn)
    _be32(p + 12, msg)
    _be32(p + 16, offset)
    _be32(p + 20, msg_len)
    _be16(p + 24, <uint16_t>ev)
    _be16(p + 26, <uint16_t>length)
    _be64(p + 28, ts)
    _be64(p + 36, ts_echo)
    _be32(p + 44, crc)
    if length:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            if start < 0 or start + length > view.len:
                raise ValueError(f"payload {start}+{length} outside {view.len} bytes")
            memcpy(p + 48, <const char *>view.buf + start, <size_t>length)
        finally:
            PyBuffer_Release(&view)
    return out


cdef inline Py_ssize_t _bisect_right(list a, long long x):
    """The index after the last element <= x (a sorted list of ints)."""
    cdef Py_ssize_t lo = 0, hi = PyList_GET_SIZE(a), mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if x < <long long>(<object>PyList_GET_ITEM(a, mid)):
            hi = mid
        else:
            lo = mid + 1
    return lo


cdef class IntervalSet:
    """Disjoint half-open integer ranges, merged on insertion (byte offsets or PSNs)."""

    cdef public list starts
    cdef public list ends

    def __init__(self) -> None:
        self.starts = []
        self.ends = []

    def __len__(self) -> int:
        return PyList_GET_SIZE(self.starts)

    def __repr__(self) -> str:
        return f"IntervalSet({list(zip(self.starts, self.ends))})"

    def ranges(self) -> list:
        return list(zip(self.starts, self.ends))

    def add(self, long long a, long long b) -> list:
        """Insert [a, b); return the sub-ranges that were not covered before."""
        cdef list starts = self.starts, ends = self.ends, new
        cdef Py_ssize_t lo, hi, k, n = PyList_GET_SIZE(starts)
        cdef long long cur, s, e, ns, ne
        if a >= b:
            return []
        # the common cases first: appending at the end, or extending the last range
        if n == 0:
            starts.append(a)
            ends.append(b)
            return [(a, b)]
        e = <long long>(<object>PyList_GET_ITEM(ends, n - 1))
        if a > e:
            starts.append(a)
            ends.append(b)
            return [(a, b)]
        if a == e:
            ends[n - 1] = b
            return [(a, b)]
        lo = _bisect_right(starts, a) - 1
        if lo < 0 or <long long>(<object>PyList_GET_ITEM(ends, lo)) < a:
            lo += 1  # the interval before does not touch [a, b)
        hi = _bisect_right(starts, b)  # intervals [lo, hi) touch or overlap [a, b)
        new = []
        cur = a
        for k in range(lo, hi):
            s = <long long>(<object>PyList_GET_ITEM(starts, k))
            e = <long long>(<object>PyList_GET_ITEM(ends, k))
            if s > cur:
                new.append((cur, s if s < b else b))
            if e > cur:
                cur = e
            if cur >= b:
                break
        if cur < b:
            new.append((cur, b))
        if lo < hi:
            s = <long long>(<object>PyList_GET_ITEM(starts, lo))
            e = <long long>(<object>PyList_GET_ITEM(ends, hi - 1))
            ns = a if a < s else s
            ne = b if b > e else e
            starts[lo:hi] = [ns]
            ends[lo:hi] = [ne]
        else:
            starts.insert(lo, a)
            ends.insert(lo, b)
        return new

    def covered(self) -> int:
        cdef long long total = 0
        cdef Py_ssize_t k
        for k in range(PyList_GET_SIZE(self.starts)):
            total += (<long long>(<object>PyList_GET_ITEM(self.ends, k))
                      - <long long>(<object>PyList_GET_ITEM(self.starts, k)))
        return total

    def __contains__(self, long long x) -> bool:
        cdef Py_ssize_t i = _bisect_right(self.starts, x) - 1
        return i >= 0 and x < <long long>(<object>PyList_GET_ITEM(self.ends, i))

    def pop_front_from(self, long long x) -> int:
        """If the first range starts at ``x``, remove it and return its end; else ``x``."""
        if PyList_GET_SIZE(self.starts) and <long long>(<object>PyList_GET_ITEM(
                self.starts, 0)) == x:
            self.starts.pop(0)
            return self.ends.pop(0)
        return x

    def discard_below(self, long long x) -> None:
        """Forget everything below ``x``."""
        cdef list starts = self.starts, ends = self.ends
        cdef Py_ssize_t k = 0, n = PyList_GET_SIZE(starts)
        while k < n and <long long>(<object>PyList_GET_ITEM(ends, k)) <= x:
            k += 1
        if k:
            del starts[:k]
            del ends[:k]
        if PyList_GET_SIZE(starts) and <long long>(<object>PyList_GET_ITEM(starts, 0)) < x:
            starts[0] = x
