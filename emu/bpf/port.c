// SPDX-License-Identifier: GPL-2.0
// Congestion signals at a switch port, in the kernel's path (tc clsact + cls_bpf).
//
// port_egress runs at the egress of every fabric port, before its HTB + FIFO. It keeps
// the port's *virtual queue*: the bytes that entered minus what the port's known rate
// drained since, so it knows the backlog of the FIFO behind it without seeing it.
//  - ECN: an ECN-capable data packet (ECT in the IP header, or the RoCEv2 UDP port, whose
//    NICs are ECN-capable) entering above kmin is marked CE with a probability rising
//    linearly to pmax at kmax, and always above kmax (RED's ramp, as DCQCN configures
//    switches; kmin == kmax is a step, as DCTCP's K).
//  - Trimming: a data packet that would overflow the buffer (cap bytes) is cut to its
//    transport header if the sender allowed it (the wire header's FLAG_TRIM_OK): the
//    header gets FLAG_TRIMMED, the priority traffic class, and goes to the port's
//    control class ahead of the data; any other packet that would overflow is dropped.
//    The kernel sized the packet for its qdiscs (qdisc_pkt_len) before this hook ran, so
//    HTB would charge a trimmed header the link time of the whole packet (measured: 8110
//    bytes per 110-byte header at 5 Mbit/s, the headers queueing behind one another in
//    the control class): the header is sent again through the port's egress
//    (bpf_redirect), which sizes it anew, with TRIM_MARK so this program lets it pass.
// nic_ingress runs at the ingress of every host port: the receiving NIC copies the IP
// header's CE mark into the transport header (FLAG_CE), where the userspace NIC reads it.
//
// The port is the filter's classid (cls_bpf hands it to the program in tc_classid): one
// loaded program serves every port of a fabric, each with its own entry in `ports`.
// Checksums: every change goes through bpf_l4_csum_replace, which updates the UDP
// checksum of a packet that carries a full one and only the pseudo-header part of one
// whose checksum is still to be computed (CHECKSUM_PARTIAL, the veth case).
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ETH_LEN 14
#define IP6_LEN 40
#define NEXTHDR_ROUTING 43
#define NEXTHDR_UDP 17
#define WIRE_PORT 4791
#define WIRE_VERSION 1
#define WIRE_DATA 1
#define WIRE_HDR 48
#define FLAG_TRIM_OK 0x0100
#define FLAG_TRIMMED 0x0200
#define FLAG_CE 0x0400
#define CTRL_DSCP 46
#define CTRL_TCLASS 0xB8
#define HTB_CTRL 0x10010
#define TRIM_MARK 0x7e1a1b0e  // a trimmed header on its second pass through the egress
#define CHUNK 256
#define MAX_CHUNKS 40

#define P_MARK 1
#define P_TRIM 2

struct port {
	struct bpf_spin_lock lock;
	__u32 flags;       // P_MARK, P_TRIM
	__u64 rate_bps;    // bytes per second the port drains
	__u64 cap;         // buffer, bytes (with P_TRIM: what does not fit is trimmed or dropped)
	__u64 kmin, kmax;  // ECN ramp, bytes
	__u32 pmax;        // marking probability at kmax, of 2^32 - 1
	__u32 pad;
	__u64 vq;          // virtual queue, bytes
	__u64 last_ns;
	__u64 packets, marked, trimmed, dropped, ce_seen, vq_max;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct port);
} ports SEC(".maps");

struct pkt {
	__u32 l4;     // offset of the UDP header (0: not UDP over IPv6)
	__u8 b0, b1;  // IPv6 header bytes 0 and 1 (version, traffic class)
	__u16 dport;
	__u16 flags;  // the wire header's flags (ours only)
	__u8 ours;    // a DATA packet of this project's wire format
};

static __always_inline int parse(struct __sk_buff *skb, struct pkt *k)
{
	__u8 ip6[8];
	__u8 srh[2];
	__u8 udp[4];
	__u8 wire[4];
	__u32 l4 = ETH_LEN + IP6_LEN;
	__u8 nh;

	__builtin_memset(k, 0, sizeof(*k));
	if (skb->protocol != bpf_htons(0x86DD))
		return 0;
	if (bpf_skb_load_bytes(skb, ETH_LEN, ip6, sizeof(ip6)))
		return 0;
	k->b0 = ip6[0];
	k->b1 = ip6[1];
	nh = ip6[6];
	if (nh == NEXTHDR_ROUTING) {
		if (bpf_skb_load_bytes(skb, l4, srh, sizeof(srh)))
			return 0;
		nh = srh[0];
		l4 += ((__u32)srh[1] + 1) * 8;
	}
	if (nh != NEXTHDR_UDP)
		return 0;
	if (bpf_skb_load_bytes(skb, l4, udp, sizeof(udp)))
		return 0;
	k->l4 = l4;
	k->dport = ((__u16)udp[2] << 8) | udp[3];
	if (k->dport != WIRE_PORT)
		return 0;
	if (bpf_skb_load_bytes(skb, l4 + 8, wire, sizeof(wire)))
		return 0;
	if (wire[0] != WIRE_VERSION || wire[1] != WIRE_DATA)
		return 0;
	k->flags = ((__u16)wire[2] << 8) | wire[3];
	k->ours = 1;
	return 1;
}

static __always_inline int set_wire_flags(struct __sk_buff *skb, __u32 l4, __u16 old, __u16 new)
{
	__be16 o = bpf_htons(old), n = bpf_htons(new);

	if (bpf_l4_csum_replace(skb, l4 + 6, o, n, sizeof(n)))
		return -1;
	return bpf_skb_store_bytes(skb, l4 + 8 + 2, &n, sizeof(n), 0);
}

// Cut a DATA packet to its wire header: UDP and IPv6 lengths, checksum, flags, traffic
// class, and the port's control class.
static __always_inline int trim(struct __sk_buff *skb, struct pkt *k)
{
	__u8 buf[CHUNK];
	__u32 l4 = k->l4;
	__u32 keep = l4 + 8 + WIRE_HDR;
	__u64 end = skb->len;
	__s64 acc = 0;
	__u16 ulen_old, ulen_new = 8 + WIRE_HDR;
	__u8 b[2];
	__be16 o, n;
	int i;

	if (end <= keep)
		return -1;
	// the removed payload leaves the sum of a packet that carries a full checksum
	for (i = 0; i < MAX_CHUNKS; i++) {
		__u64 off = keep + i * CHUNK;
		__u64 size, sz4;

		if (off >= end)
			break;
		size = end - off;
		// hide what the compiler knows, so the bounds the verifier needs are tested here
		asm volatile("" : "=r"(size) : "0"(size));
		if (size > CHUNK)
			size = CHUNK;
		asm volatile("" : "=r"(size) : "0"(size));
		// 1..CHUNK (it is already, as off < end) in a form every verifier can bound:
		// Debian 12's 6.1 learns no lower bound from "size != 0" and refused the
		// program ("invalid zero-sized read")
		size = ((size - 1) & (CHUNK - 1)) + 1;
		__builtin_memset(buf, 0, sizeof(buf));
		if (bpf_skb_load_bytes(skb, off, buf, size))
			return -1;
		sz4 = (size + 3) & ~3U;
		asm volatile("" : "=r"(sz4) : "0"(sz4));
		if (sz4 > CHUNK)
			sz4 = CHUNK;
		acc = bpf_csum_diff((__be32 *)buf, sz4, 0, 0, (__wsum)acc);
	}
	if (bpf_l4_csum_replace(skb, l4 + 6, 0, (__u32)acc, 0))
		return -1;
	if (bpf_skb_load_bytes(skb, l4 + 4, b, 2))
		return -1;
	ulen_old = ((__u16)b[0] << 8) | b[1];
	o = bpf_htons(ulen_old);
	n = bpf_htons(ulen_new);
	// the length is in the UDP header and in the pseudo-header
	if (bpf_l4_csum_replace(skb, l4 + 6, o, n, sizeof(n)))
		return -1;
	if (bpf_l4_csum_replace(skb, l4 + 6, o, n, BPF_F_PSEUDO_HDR | sizeof(n)))
		return -1;
	if (bpf_skb_store_bytes(skb, l4 + 4, &n, sizeof(n), 0))
		return -1;
	if (set_wire_flags(skb, l4, k->flags, k->flags | FLAG_TRIMMED))
		return -1;
	// IPv6 payload length and traffic class (the priority class, ECN not-ECT)
	n = bpf_htons((__u16)(keep - ETH_LEN - IP6_LEN));
	if (bpf_skb_store_bytes(skb, ETH_LEN + 4, &n, sizeof(n), 0))
		return -1;
	b[0] = 0x60 | (CTRL_TCLASS >> 4);
	b[1] = ((CTRL_TCLASS & 0x0f) << 4) | (k->b1 & 0x0f);
	if (bpf_skb_store_bytes(skb, ETH_LEN, b, 2, 0))
		return -1;
	if (bpf_skb_change_tail(skb, keep, 0))
		return -1;
	skb->priority = HTB_CTRL;
	return 0;
}

enum { PASS, MARK_MAYBE, TRIM, DROP };

SEC("tc")
int port_egress(struct __sk_buff *skb)
{
	__u32 id = skb->tc_classid;
	struct port *p = bpf_map_lookup_elem(&ports, &id);
	struct pkt k;
	__u64 now, vq, cap, drained, dt;
	__u32 len = skb->len;
	__u32 flags;
	int ctrl, verdict = PASS;

	if (skb->mark == TRIM_MARK) {
		skb->mark = 0;  // counted on its first pass
		return TC_ACT_OK;
	}
	if (!p)
		return TC_ACT_OK;
	parse(skb, &k);
	ctrl = 0;
	if (skb->protocol == bpf_htons(0x86DD) &&
	    ((((k.b0 & 0x0f) << 4) | (k.b1 >> 4)) >> 2) == CTRL_DSCP)
		ctrl = 1;
	now = bpf_ktime_get_ns();
	bpf_spin_lock(&p->lock);
	flags = p->flags;
	dt = now - p->last_ns;
	if (dt > 1000000000ULL)
		dt = 1000000000ULL;
	p->last_ns = now;
	drained = dt * p->rate_bps / 1000000000ULL;
	vq = p->vq > drained ? p->vq - drained : 0;
	cap = p->cap;
	if (!ctrl && (flags & P_TRIM) && vq + len > cap) {
		verdict = k.ours && (k.flags & FLAG_TRIM_OK) ? TRIM : DROP;
		if (verdict == TRIM)
			vq += k.l4 + 8 + WIRE_HDR;
	} else {
		vq += len;
		if (!ctrl && (flags & P_MARK) && vq > p->kmin)
			verdict = MARK_MAYBE;
	}
	p->vq = vq;
	if (vq > p->vq_max)
		p->vq_max = vq;
	bpf_spin_unlock(&p->lock);
	__sync_fetch_and_add(&p->packets, 1);

	if (verdict == DROP) {
		__sync_fetch_and_add(&p->dropped, 1);
		return TC_ACT_SHOT;
	}
	if (verdict == TRIM) {
		if (trim(skb, &k)) {
			__sync_fetch_and_add(&p->dropped, 1);
			return TC_ACT_SHOT;
		}
		__sync_fetch_and_add(&p->trimmed, 1);
		skb->mark = TRIM_MARK;
		return bpf_redirect(skb->ifindex, 0);
	}
	if (verdict == MARK_MAYBE) {
		__u8 ecn = (k.b1 >> 4) & 3;
		int ect = ecn != 0 || (k.l4 && k.dport == WIRE_PORT);

		if (!ect || ecn == 3)
			return TC_ACT_OK;
		if (vq < p->kmax && p->kmax > p->kmin) {
			__u64 prob = (__u64)p->pmax * (vq - p->kmin) / (p->kmax - p->kmin);

			if (bpf_get_prandom_u32() >= prob)
				return TC_ACT_OK;
		}
		__u8 b1 = k.b1 | 0x30;
		if (bpf_skb_store_bytes(skb, ETH_LEN + 1, &b1, 1, 0) == 0)
			__sync_fetch_and_add(&p->marked, 1);
	}
	return TC_ACT_OK;
}

SEC("tc")
int nic_ingress(struct __sk_buff *skb)
{
	__u32 id = skb->tc_classid;
	struct port *p = bpf_map_lookup_elem(&ports, &id);
	struct pkt k;

	if (!p)
		return TC_ACT_OK;
	if (!parse(skb, &k) || ((k.b1 >> 4) & 3) != 3)
		return TC_ACT_OK;
	if (set_wire_flags(skb, k.l4, k.flags, k.flags | FLAG_CE) == 0)
		__sync_fetch_and_add(&p->ce_seen, 1);
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
