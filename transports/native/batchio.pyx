# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Batched datagram I/O for the transport engine (transports/io/engine.py), compiled.

``RxBatch.recv(fd)`` reads every datagram waiting on a socket, up to its batch size, in
one ``recvmmsg``, each with the kernel's receive timestamp (SO_TIMESTAMPNS, turned from
CLOCK_REALTIME into CLOCK_MONOTONIC, the cores' clock): a datagram read late by the
engine still carries the instant it reached the host. ``send_batch`` sends a list of
datagrams to one destination on one socket in one ``sendmmsg``, control datagrams with a
traffic class. Nothing here reads a protocol field but the connection id, and the
kind and flag bytes that choose a datagram's class (their offsets come from wire.py).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy, memset

import socket as _socket


cdef extern from "<sys/socket.h>":
    struct msghdr:
        void *msg_name
        unsigned int msg_namelen
        void *msg_iov
        size_t msg_iovlen
        void *msg_control
        size_t msg_controllen
        int msg_flags
    struct mmsghdr:
        msghdr msg_hdr
        unsigned int msg_len
    struct cmsghdr:
        size_t cmsg_len
        int cmsg_level
        int cmsg_type
    size_t CMSG_LEN(size_t)
    size_t CMSG_SPACE(size_t)
    unsigned char *CMSG_DATA(cmsghdr *)


cdef extern from "<sys/uio.h>":
    struct iovec:
        void *iov_base
        size_t iov_len


cdef extern from "batchio.h":
    int SAE_CTRL_LEN
    int sae_recv_batch(int fd, mmsghdr *msgs, iovec *iov, char *ctrl, unsigned char *buf,
                       int slot, int vlen, int *lens, double *stamps) nogil
    int sae_send_batch(int fd, mmsghdr *msgs, int n) nogil


SO_TIMESTAMPNS = 35  # <asm-generic/socket.h>; SCM_TIMESTAMPNS has the same value


def enable_timestamps(sock) -> None:
    """Ask the kernel to stamp every datagram ``sock`` receives (SO_TIMESTAMPNS)."""
    sock.setsockopt(_socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)


cdef class RxBatch:
    """A receive buffer for ``vlen`` datagrams of at most ``slot`` bytes each; the
    views ``recv`` returns are valid until its next call."""

    cdef readonly int vlen, slot
    cdef bytearray _buf
    cdef object _view
    cdef mmsghdr *_msgs
    cdef iovec *_iov
    cdef char *_ctrl
    cdef int *_lens
    cdef double *_stamps

    def __cinit__(self, int vlen=64, int slot=9216):
        if vlen < 1 or slot < 64:
            raise ValueError(f"RxBatch vlen={vlen} must be >= 1 and slot={slot} >= 64 bytes")
        self.vlen, self.slot = vlen, slot
        self._buf = bytearray(vlen * slot)
        self._view = memoryview(self._buf)
        self._msgs = <mmsghdr *>calloc(vlen, sizeof(mmsghdr))
        self._iov = <iovec *>calloc(vlen, sizeof(iovec))
        self._ctrl = <char *>calloc(vlen, SAE_CTRL_LEN)
        self._lens = <int *>calloc(vlen, sizeof(int))
        self._stamps = <double *>calloc(vlen, sizeof(double))
        if not (self._msgs and self._iov and self._ctrl and self._lens and self._stamps):
            raise MemoryError()

    def __dealloc__(self):
        free(self._msgs)
        free(self._iov)
        free(self._ctrl)
        free(self._lens)
        free(self._stamps)

    def recv(self, int fd) -> list:
        """Every datagram waiting on ``fd`` (at most ``vlen``), without waiting: a list of
        (connection id or -1, view of the datagram, kernel arrival time). OSError for an
        error other than "nothing waiting"."""
        cdef unsigned char *buf = <unsigned char *>(<char *>self._buf)
        cdef int n, i, ln, slot = self.slot
        cdef long long conn
        cdef unsigned char *p
        cdef list out = []
        with nogil:
            n = sae_recv_batch(fd, self._msgs, self._iov, self._ctrl, buf, slot, self.vlen,
                               self._lens, self._stamps)
        if n < 0:
            raise OSError(-n, "recvmmsg")
        view = self._view
        for i in range(n):
            ln = self._lens[i]
            p = buf + <size_t>i * slot
            if ln >= 8:
                conn = (<long long>p[4] << 24) | (p[5] << 16) | (p[6] << 8) | p[7]
            else:
                conn = -1
            out.append((conn, view[i * slot:i * slot + ln], self._stamps[i]))
        return out


def sockaddr(str addr, int port) -> bytes:
    """The ``struct sockaddr_in6`` of an IPv6 address and port (a destination for
    ``send_batch``)."""
    packed = _socket.inet_pton(_socket.AF_INET6, addr)
    # family (host order), port (network order), flowinfo, address, scope id
    return (_socket.AF_INET6.to_bytes(2, "little") + port.to_bytes(2, "big") + bytes(4)
            + packed + bytes(4))


cdef class TxBatch:
    """Room to send up to ``vlen`` datagrams in one ``sendmmsg``; control datagrams get
    traffic class ``tclass``. Data datagrams are those whose kind byte (at ``kind_at``)
    is ``data_kind`` or whose flags' low byte (at ``flags_at``) has ``data_flag``."""

    cdef readonly int vlen, tclass
    # data datagrams among those the last ``send`` was given (sent or refused)
    cdef readonly Py_ssize_t data_given
    cdef int kind_at, flags_at, data_kind, data_flag
    cdef mmsghdr *_msgs
    cdef iovec *_iov
    cdef char *_ctrl
    cdef Py_buffer *_views

    def __cinit__(self, int vlen, int tclass, int kind_at, int flags_at, int data_kind,
                  int data_flag):
        if vlen < 1:
            raise ValueError(f"TxBatch vlen={vlen} must be >= 1")
        self.vlen, self.tclass = vlen, tclass
        self.kind_at, self.flags_at = kind_at, flags_at
        self.data_kind, self.data_flag = data_kind, data_flag
        self._msgs = <mmsghdr *>calloc(vlen, sizeof(mmsghdr))
        self._iov = <iovec *>calloc(vlen, sizeof(iovec))
        self._ctrl = <char *>calloc(vlen, SAE_CTRL_LEN)
        self._views = <Py_buffer *>calloc(vlen, sizeof(Py_buffer))
        if not (self._msgs and self._iov and self._ctrl and self._views):
            raise MemoryError()

    def __dealloc__(self):
        free(self._msgs)
        free(self._iov)
        free(self._ctrl)
        free(self._views)

    def send(self, int fd, bytes dest, list datagrams) -> int:
        """Send ``datagrams`` (bytes-like) to ``dest`` (``sockaddr``) on ``fd``, in
        ``sendmmsg`` calls of at most ``vlen``; the number the kernel took (a refused
        one is lost, as on a full NIC queue). ``data_given`` then counts the data
        datagrams among them."""
        cdef Py_ssize_t total = PyList_GET_SIZE(datagrams), done = 0, k, m, ndata = 0
        cdef int sent = 0, r, i
        cdef unsigned char *p
        cdef cmsghdr *c
        cdef char *name = PyBytes_AS_STRING(dest)
        cdef unsigned int namelen = <unsigned int>PyBytes_GET_SIZE(dest)
        while done < total:
            m = min(total - done, self.vlen)
            got = 0
            try:
                for k in range(m):
                    PyObject_GetBuffer(<object>PyList_GET_ITEM(datagrams, done + k),
                                       &self._views[k], PyBUF_SIMPLE)
                    got += 1
                    p = <unsigned char *>self._views[k].buf
                    self._iov[k].iov_base = p
                    self._iov[k].iov_len = self._views[k].len
                    memset(&self._msgs[k].msg_hdr, 0, sizeof(msghdr))
                    self._msgs[k].msg_hdr.msg_name = name
                    self._msgs[k].msg_hdr.msg_namelen = namelen
                    self._msgs[k].msg_hdr.msg_iov = &self._iov[k]
                    self._msgs[k].msg_hdr.msg_iovlen = 1
                    if self._views[k].len <= self.flags_at:
                        pass
                    elif p[self.kind_at] == self.data_kind or p[self.flags_at] & self.data_flag:
                        ndata += 1
                    else:
                        c = <cmsghdr *>(self._ctrl + k * SAE_CTRL_LEN)
                        c.cmsg_level = 41  # IPPROTO_IPV6
                        c.cmsg_type = 67  # IPV6_TCLASS
                        c.cmsg_len = CMSG_LEN(sizeof(int))
                        memcpy(CMSG_DATA(c), &self.tclass, sizeof(int))
                        self._msgs[k].msg_hdr.msg_control = c
                        self._msgs[k].msg_hdr.msg_controllen = CMSG_SPACE(sizeof(int))
                with nogil:
                    r = sae_send_batch(fd, self._msgs, <int>m)
                sent += r
            finally:
                for i in range(got):
                    PyBuffer_Release(&self._views[i])
            done += m
        self.data_given = ndata
        return sent
