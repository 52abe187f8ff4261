/* Batched datagram I/O for transports/native/batchio.pyx: recvmmsg with the kernel's
 * receive timestamps (SO_TIMESTAMPNS, CLOCK_REALTIME, turned into CLOCK_MONOTONIC) and
 * sendmmsg with an optional traffic class per datagram. */
#ifndef SAE_BATCHIO_H
#define SAE_BATCHIO_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#define SAE_CTRL_LEN 64 /* room for one timestamp or one traffic class cmsg */

static inline double sae_now(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Read up to vlen datagrams (no wait). lens[i], stamps[i] (monotonic seconds; the
 * time of this call if the datagram carries no timestamp). Returns the count, 0 when
 * none was waiting, -errno on another error. */
static int sae_recv_batch(int fd, struct mmsghdr *msgs, struct iovec *iov, char *ctrl,
                          unsigned char *buf, int slot, int vlen, int *lens, double *stamps) {
    int i, n;
    double mono, offset;
    for (i = 0; i < vlen; i++) {
        iov[i].iov_base = buf + (size_t)i * slot;
        iov[i].iov_len = slot;
        memset(&msgs[i].msg_hdr, 0, sizeof(struct msghdr));
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        msgs[i].msg_hdr.msg_control = ctrl + (size_t)i * SAE_CTRL_LEN;
        msgs[i].msg_hdr.msg_controllen = SAE_CTRL_LEN;
    }
    n = recvmmsg(fd, msgs, vlen, MSG_DONTWAIT, NULL);
    if (n < 0)
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
    mono = sae_now(CLOCK_MONOTONIC);
    offset = sae_now(CLOCK_REALTIME) - mono;
    for (i = 0; i < n; i++) {
        struct cmsghdr *c;
        lens[i] = (int)msgs[i].msg_len;
        stamps[i] = mono;
        for (c = CMSG_FIRSTHDR(&msgs[i].msg_hdr); c; c = CMSG_NXTHDR(&msgs[i].msg_hdr, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS) {
                struct timespec ts;
                double t;
                memcpy(&ts, CMSG_DATA(c), sizeof ts);
                t = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 - offset;
                /* a realtime step between the two readings: keep the call's time */
                if (t <= mono && t > mono - 60.0)
                    stamps[i] = t;
            }
        }
    }
    return n;
}

/* Send n prepared datagrams (msgs[i] filled by the caller); a datagram the kernel
 * refuses is skipped (lost, as on a full NIC queue). Returns how many were sent. */
static int sae_send_batch(int fd, struct mmsghdr *msgs, int n) {
    int i = 0, sent = 0, r;
    while (i < n) {
        r = sendmmsg(fd, msgs + i, n - i, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            i += 1; /* the first one failed: drop it, go on with the rest */
            continue;
        }
        sent += r;
        i += r;
    }
    return sent;
}
#endif
