// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Journal recovery (jbd2/jrecover.c) on synthetic journals: a small encoder
 * here writes jbd2 logs into a temporary file by the on-disk format alone
 * (byte offsets and crc32c, not include/wbcfs/jbd2/format.h's structs or helpers), and the
 * tests check the bytes that replay leaves at home and in the journal
 * superblock. Every behaviour runs for each tag format: 32- and 64-bit
 * block numbers, no checksums, checksums v2 and v3 (v1 has its own).
 */
#include <check.h>
#include "helpers.h"
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ext2fs/ext2fs.h>
#include "wbcfs/jbd2.h"

#define NBLK 512		/* device blocks */
#define JLEN 64			/* journal blocks */
#define JBASE 256		/* the journal lives in device blocks [JBASE, JBASE + JLEN) */
#define MAGIC 0xc03b3998U

#define F_64BIT 0x2
#define F_ASYNC 0x4
#define F_CSUM2 0x8
#define F_CSUM3 0x10
#define F_FC 0x20

#define TAG_ESCAPE 1
#define TAG_SAME_UUID 2
#define TAG_LAST 8

static const uint32_t configs[] = { 0, F_64BIT, F_CSUM3, F_CSUM3 | F_64BIT, F_CSUM2 | F_64BIT,
				    F_CSUM2 };
#define NR_CONFIGS (int)(sizeof(configs) / sizeof(configs[0]))

/* A journal being written, and the device file it lives in. */
struct enc {
	char path[64];
	int fd;
	unsigned bs;
	uint32_t incompat;
	bool v1;		/* compat CHECKSUM: crc32_be of each transaction's blocks */
	uint32_t v1sum;
	uint32_t first, last;	/* the ring */
	uint32_t start, seq0;	/* s_start, s_sequence */
	uint32_t pos, tid;	/* next log block, next transaction */
	uint32_t nr_fc;
	uint64_t map[JLEN];
	uint64_t sec;		/* commit time of the next commit */
	uint8_t uuid[16];
};

/*
 * C_BADCSUM, C_STALE: the commit header damaged (a bad checksum, with a
 * later or an older commit time); C_TORN_TAIL: only what follows the
 * header damaged, as when only the header's sector reached the disk.
 */
enum commit_kind { C_OK, C_NONE, C_BADCSUM, C_STALE, C_TORN_TAIL };

/* One transaction to write. */
struct txn {
	int n;
	uint64_t blk[16];
	const uint8_t *data[16];
	int nrv;
	uint64_t rv[16];
	int bad_data;		/* 1 + index of a data block given a wrong checksum, or 0 */
	enum commit_kind commit;
};

static void put32(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, 4);
}

static void put16(uint8_t *p, uint16_t v)
{
	v = htobe16(v);
	memcpy(p, &v, 2);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return be32toh(v);
}

static uint32_t crc(uint32_t c, const void *p, size_t n)
{
	return ext2fs_crc32c_le(c, p, n);
}

static bool has_csum(const struct enc *e)
{
	return e->incompat & (F_CSUM2 | F_CSUM3);
}

static uint32_t seed(const struct enc *e)
{
	return crc(~0U, e->uuid, 16);
}

static uint8_t *blk_alloc(const struct enc *e)
{
	void *p;

	ck_assert_int_eq(posix_memalign(&p, 4096, e->bs), 0);
	memset(p, 0, e->bs);
	return p;
}

static void dev_write(const struct enc *e, uint64_t dblk, const void *buf)
{
	ck_assert_int_eq(pwrite(e->fd, buf, e->bs, (off_t)dblk * e->bs), (ssize_t)e->bs);
}

static void dev_read(const struct enc *e, uint64_t dblk, void *buf)
{
	ck_assert_int_eq(pread(e->fd, buf, e->bs, (off_t)dblk * e->bs), (ssize_t)e->bs);
}

/* Write the journal block at the log head and step it around the ring. */
static void log_put(struct enc *e, const uint8_t *buf)
{
	dev_write(e, e->map[e->pos], buf);
	if (++e->pos == e->last)
		e->pos = e->first;
}

static void write_jsb(struct enc *e, uint32_t start, uint32_t seq)
{
	uint8_t *sb = blk_alloc(e);

	put32(sb, MAGIC);
	put32(sb + 4, 4);			/* superblock v2 */
	put32(sb + 12, e->bs);
	put32(sb + 16, JLEN);			/* s_maxlen */
	put32(sb + 20, e->first);
	put32(sb + 24, seq);
	put32(sb + 28, start);
	put32(sb + 36, e->v1 ? 1 : 0);
	put32(sb + 40, e->incompat);
	memcpy(sb + 48, e->uuid, 16);
	put32(sb + 64, 1);			/* s_nr_users */
	put32(sb + 0x54, e->nr_fc);
	if (has_csum(e)) {
		sb[0x50] = 4;			/* crc32c */
		put32(sb + 0xfc, crc(~0U, sb, 1024));
	}
	dev_write(e, e->map[0], sb);
	free(sb);
}

/*
 * A journal of JLEN blocks scattered over [JBASE, JBASE + JLEN) (a
 * permutation, so the replay must follow the map), its log starting at
 * @start with transaction @tid.
 */
static void enc_init(struct enc *e, unsigned bs, uint32_t incompat, uint32_t start, uint32_t tid)
{
	int i;

	memset(e, 0, sizeof(*e));
	e->bs = bs;
	e->incompat = incompat;
	e->fd = t_tmpfile(e->path, (uint64_t)NBLK * bs);
	ck_assert_int_ge(e->fd, 0);
	for (i = 0; i < JLEN; i++)
		e->map[i] = JBASE + (uint64_t)(i * 7 % JLEN);
	for (i = 0; i < 16; i++)
		e->uuid[i] = (uint8_t)(0x40 + i * 3);
	e->first = 1;
	e->nr_fc = (incompat & F_FC) ? 8 : 0;
	e->last = JLEN - e->nr_fc;
	e->start = e->pos = start;
	e->seq0 = e->tid = tid;
	e->sec = 1700000000;
	write_jsb(e, start, tid);
}

static void enc_done(struct enc *e)
{
	close(e->fd);
	unlink(e->path);
}

static size_t tag_bytes(const struct enc *e)
{
	if (e->incompat & F_CSUM3)
		return 16;
	return 8 + ((e->incompat & F_CSUM2) ? 2 : 0) + ((e->incompat & F_64BIT) ? 4 : 0);
}

static void set_tail(const struct enc *e, uint8_t *blk)
{
	if (has_csum(e))
		put32(blk + e->bs - 4, crc(seed(e), blk, e->bs));
}

/* Tag @i of a descriptor at @p; returns its size with any uuid. */
static size_t put_tag(const struct enc *e, uint8_t *p, uint64_t blk, uint32_t flags,
		      uint32_t csum)
{
	size_t n = tag_bytes(e);

	put32(p, (uint32_t)blk);
	if (e->incompat & F_CSUM3) {
		put32(p + 4, flags);
		put32(p + 8, (uint32_t)(blk >> 32));
		put32(p + 12, csum);
	} else {
		put16(p + 4, (uint16_t)csum);
		put16(p + 6, (uint16_t)flags);
		if (e->incompat & F_64BIT)
			put32(p + 8, (uint32_t)(blk >> 32));
	}
	if (!(flags & TAG_SAME_UUID)) {
		memcpy(p + n, e->uuid, 16);
		n += 16;
	}
	return n;
}

static void put_descriptor(struct enc *e, const struct txn *t)
{
	uint8_t *d = blk_alloc(e), *logged[16];
	size_t off = 12;
	int i;

	put32(d, MAGIC);
	put32(d + 4, 1);
	put32(d + 8, e->tid);
	for (i = 0; i < t->n; i++) {
		uint32_t flags = (i ? TAG_SAME_UUID : 0) | (i == t->n - 1 ? TAG_LAST : 0);
		uint32_t tidbe = htobe32(e->tid), c;

		logged[i] = blk_alloc(e);
		memcpy(logged[i], t->data[i], e->bs);
		if (get32(logged[i]) == MAGIC) {
			flags |= TAG_ESCAPE;
			memset(logged[i], 0, 4);
		}
		c = crc(crc(seed(e), &tidbe, 4), logged[i], e->bs);
		if (i + 1 == t->bad_data)
			c ^= 0x5a5a;
		off += put_tag(e, d + off, t->blk[i], flags, c);
		ck_assert_uint_le(off, e->bs - 4);
	}
	set_tail(e, d);
	log_put(e, d);
	if (e->v1)
		e->v1sum = ext2fs_crc32_be(e->v1sum, d, e->bs);
	for (i = 0; i < t->n; i++) {
		if (e->v1)
			e->v1sum = ext2fs_crc32_be(e->v1sum, logged[i], e->bs);
		log_put(e, logged[i]);
		free(logged[i]);
	}
	free(d);
}

static void put_revoke(struct enc *e, const struct txn *t)
{
	uint8_t *r = blk_alloc(e);
	size_t off = 16;
	int i;

	put32(r, MAGIC);
	put32(r + 4, 5);
	put32(r + 8, e->tid);
	for (i = 0; i < t->nrv; i++) {
		if (e->incompat & F_64BIT) {
			put32(r + off, (uint32_t)(t->rv[i] >> 32));
			off += 4;
		}
		put32(r + off, (uint32_t)t->rv[i]);
		off += 4;
	}
	put32(r + 12, (uint32_t)off);
	set_tail(e, r);
	log_put(e, r);
	free(r);
}

static void put_commit(struct enc *e, enum commit_kind kind)
{
	uint8_t *c = blk_alloc(e);
	uint64_t sec = htobe64(kind == C_STALE ? e->sec - 1000 : e->sec);

	put32(c, MAGIC);
	put32(c + 4, 2);
	put32(c + 8, e->tid);
	memcpy(c + 48, &sec, 8);
	if (e->v1) {
		c[12] = 1;		/* crc32 */
		c[13] = 4;
		put32(c + 16, kind == C_BADCSUM ? e->v1sum ^ 1 : e->v1sum);
	}
	if (has_csum(e))
		put32(c + 16, crc(seed(e), c, e->bs));
	if (kind == C_BADCSUM || kind == C_STALE)
		c[20] ^= 1;		/* h_chksum[1]: the header itself is bad */
	if (kind == C_TORN_TAIL)
		memset(c + 512, 0xa5, e->bs - 512);	/* past the header's sector */
	log_put(e, c);
	free(c);
}

static void enc_txn(struct enc *e, const struct txn *t)
{
	e->v1sum = ~0U;
	if (t->n)
		put_descriptor(e, t);
	if (t->nrv)
		put_revoke(e, t);
	if (t->commit != C_NONE)
		put_commit(e, t->commit);
	e->tid++;
	e->sec += 5;
}

/* A recognisable block: @tag repeated. */
static uint8_t *content(const struct enc *e, uint8_t tag)
{
	uint8_t *b = blk_alloc(e);

	memset(b, tag, e->bs);
	return b;
}

static bool home_is(const struct enc *e, uint64_t blk, const uint8_t *want)
{
	uint8_t *got = blk_alloc(e);
	bool same;

	dev_read(e, blk, got);
	same = memcmp(got, want, e->bs) == 0;
	free(got);
	return same;
}

static bool home_zero(const struct enc *e, uint64_t blk)
{
	uint8_t *z = blk_alloc(e);
	bool ret = home_is(e, blk, z);

	free(z);
	return ret;
}

static int replay(struct enc *e, struct jrec_stats *st)
{
	struct jrec_log log = {
		.fd = e->fd,
		.blocksize = e->bs,
		.map = e->map,
		.nr_blocks = JLEN,
		.fs_blocks = JBASE,
		.dev = "test",
	};

	return jrec_replay(&log, st);
}

/* The journal superblock after a replay: empty, next sequence, valid checksum. */
static void check_jsb_empty(const struct enc *e, uint32_t next_seq)
{
	uint8_t *sb = blk_alloc(e);

	dev_read(e, e->map[0], sb);
	ck_assert_uint_eq(get32(sb + 28), 0);
	ck_assert_uint_eq(get32(sb + 24), next_seq);
	if (has_csum(e)) {
		uint32_t stored = get32(sb + 0xfc);

		memset(sb + 0xfc, 0, 4);
		ck_assert_uint_eq(stored, crc(~0U, sb, 1024));
	}
	free(sb);
}

static uint32_t jsb_start(const struct enc *e)
{
	uint8_t *sb = blk_alloc(e);
	uint32_t start;

	dev_read(e, e->map[0], sb);
	start = get32(sb + 28);
	free(sb);
	return start;
}

#define TXN(...) ((struct txn){ __VA_ARGS__ })

START_TEST(single_transaction)
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *a, *b, *c;

	enc_init(&e, 4096, configs[_i], 1, 10);
	a = content(&e, 0xa1);
	b = content(&e, 0xb2);
	c = content(&e, 0xc3);
	enc_txn(&e, &TXN(.n = 3, .blk = { 5, 6, 200 }, .data = { a, b, c }));
	ck_assert_int_eq(replay(&e, &st), 0);
	ck_assert_uint_eq(st.transactions, 1);
	ck_assert_uint_eq(st.replayed, 3);
	ck_assert(home_is(&e, 5, a));
	ck_assert(home_is(&e, 6, b));
	ck_assert(home_is(&e, 200, c));
	ck_assert(home_zero(&e, 7));
	/* the kernel's rule: the next log starts one tid past the end found */
	check_jsb_empty(&e, 12);
	free(a), free(b), free(c);
	enc_done(&e);
}
END_TEST

START_TEST(several_transactions_in_order)
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *a1 = NULL, *a2, *a3, *b;

	enc_init(&e, 4096, configs[_i], 1, 0xfffffffe);	/* tids wrap past 2^32 */
	a1 = content(&e, 1);
	a2 = content(&e, 2);
	a3 = content(&e, 3);
	b = content(&e, 0xbb);
	enc_txn(&e, &TXN(.n = 2, .blk = { 20, 21 }, .data = { a1, b }));
	enc_txn(&e, &TXN(.n = 1, .blk = { 20 }, .data = { a2 }));
	enc_txn(&e, &TXN(.n = 1, .blk = { 20 }, .data = { a3 }));
	ck_assert_int_eq(replay(&e, &st), 0);
	ck_assert_uint_eq(st.transactions, 3);
	ck_assert_uint_eq(st.replayed, 4);
	ck_assert(home_is(&e, 20, a3));
	ck_assert(home_is(&e, 21, b));
	check_jsb_empty(&e, 2);
	free(a1), free(a2), free(a3), free(b);
	enc_done(&e);
}
END_TEST

START_TEST(ring_wraps)
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *d[6];
	int i;

	/* the log starts 3 blocks before the end of the ring */
	enc_init(&e, 4096, configs[_i], JLEN - 3, 7);
	for (i = 0; i < 6; i++)
		d[i] = content(&e, (uint8_t)(0x10 + i));
	enc_txn(&e, &TXN(.n = 4, .blk = { 30, 31, 32, 33 }, .data = { d[0], d[1], d[2], d[3] }));
	enc_txn(&e, &TXN(.n = 2, .blk = { 34, 30 }, .data = { d[4], d[5] }));
	ck_assert_uint_lt(e.pos, JLEN - 3);	/* it did wrap */
	ck_assert_int_eq(replay(&e, &st), 0);
	ck_assert_uint_eq(st.transactions, 2);
	ck_assert(home_is(&e, 30, d[5]));
	ck_assert(home_is(&e, 31, d[1]));
	ck_assert(home_is(&e, 33, d[3]));
	ck_assert(home_is(&e, 34, d[4]));
	check_jsb_empty(&e, 10);
	for (i = 0; i < 6; i++)
		free(d[i]);
	enc_done(&e);
}
END_TEST

START_TEST(revokes_across_transactions)
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *x1, *x3, *y1, *z2;

	enc_init(&e, 4096, configs[_i], 1, 100);
	x1 = content(&e, 0x11);
	x3 = content(&e, 0x33);
	y1 = content(&e, 0x77);
	z2 = content(&e, 0x22);
	/* T100: X and Y logged, Y revoked in the same transaction */
	enc_txn(&e, &TXN(.n = 2, .blk = { 40, 41 }, .data = { x1, y1 }, .nrv = 1, .rv = { 41 }));
	/* T101: X revoked, Z logged */
	enc_txn(&e, &TXN(.n = 1, .blk = { 42 }, .data = { z2 }, .nrv = 1, .rv = { 40 }));
	/* T102: X logged again: after its revoke, so it goes home */
	enc_txn(&e, &TXN(.n = 1, .blk = { 40 }, .data = { x3 }, .nrv = 1, .rv = { 43 }));
	ck_assert_int_eq(replay(&e, &st), 0);
	ck_assert_uint_eq(st.transactions, 3);
	ck_assert(home_is(&e, 40, x3));
	ck_assert(home_zero(&e, 41));
	ck_assert(home_is(&e, 42, z2));
	ck_assert_uint_eq(st.replayed, 2);	/* Z, X of T102 */
	ck_assert_uint_eq(st.revoked, 2);	/* X of T100, Y */
	free(x1), free(x3), free(y1), free(z2);
	enc_done(&e);
}
END_TEST

START_TEST(escaped_block)
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *m;
	uint32_t magic = htobe32(MAGIC);

	enc_init(&e, 4096, configs[_i], 1, 5);
	m = content(&e, 0x5e);
	memcpy(m, &magic, 4);
	enc_txn(&e, &TXN(.n = 1, .blk = { 50 }, .data = { m }));
	ck_assert_int_eq(replay(&e, &st), 0);
	ck_assert_uint_eq(st.replayed, 1);
	ck_assert(home_is(&e, 50, m));
	free(m);
	enc_done(&e);
}
END_TEST

START_TEST(torn_last_transaction)
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *a, *b;

	enc_init(&e, 4096, configs[_i], 1, 3);
	a = content(&e, 0xaa);
	b = content(&e, 0xbb);
	enc_txn(&e, &TXN(.n = 1, .blk = { 60 }, .data = { a }));
	enc_txn(&e, &TXN(.n = 2, .blk = { 60, 61 }, .data = { b, b }, .commit = C_NONE));
	ck_assert_int_eq(replay(&e, &st), 0);
	ck_assert_uint_eq(st.transactions, 1);
	ck_assert(home_is(&e, 60, a));
	ck_assert(home_zero(&e, 61));
	check_jsb_empty(&e, 5);
	free(a), free(b);
	enc_done(&e);
}
END_TEST

/* A damaged commit header (checksums only): the kernel replays what came before and fails. */
START_TEST(bad_commit_checksum)
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *a, *b;

	if (!(configs[_i] & (F_CSUM2 | F_CSUM3)))
		return;
	enc_init(&e, 4096, configs[_i], 1, 3);
	a = content(&e, 0xaa);
	b = content(&e, 0xbb);
	enc_txn(&e, &TXN(.n = 1, .blk = { 60 }, .data = { a }));
	enc_txn(&e, &TXN(.n = 2, .blk = { 60, 61 }, .data = { b, b }, .commit = C_BADCSUM));
	ck_assert_int_eq(replay(&e, &st), -EUCLEAN);
	ck_assert_uint_eq(st.transactions, 1);
	ck_assert(home_is(&e, 60, a));
	ck_assert(home_zero(&e, 61));
	ck_assert_uint_eq(jsb_start(&e), 1);	/* left for e2fsck */
	free(a), free(b);
	enc_done(&e);
}
END_TEST

/*
 * A commit block whose header is whole but whose rest is not (the header's
 * sector reached the disk, the others did not): committed, as the kernel
 * has it since 6.11 ("incomplete commit block"); the log goes on after it.
 */
START_TEST(incomplete_commit_block)
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *a, *b, *c;

	if (!(configs[_i] & (F_CSUM2 | F_CSUM3)))
		return;
	enc_init(&e, 4096, configs[_i], 1, 3);
	a = content(&e, 0xaa);
	b = content(&e, 0xbb);
	c = content(&e, 0xcc);
	enc_txn(&e, &TXN(.n = 1, .blk = { 60 }, .data = { a }));
	enc_txn(&e, &TXN(.n = 2, .blk = { 60, 61 }, .data = { b, b }, .commit = C_TORN_TAIL));
	enc_txn(&e, &TXN(.n = 1, .blk = { 62 }, .data = { c }));
	ck_assert_int_eq(replay(&e, &st), 0);
	ck_assert_uint_eq(st.transactions, 3);
	ck_assert(home_is(&e, 60, b));
	ck_assert(home_is(&e, 61, b));
	ck_assert(home_is(&e, 62, c));
	check_jsb_empty(&e, 7);
	free(a), free(b), free(c);
	enc_done(&e);
}
END_TEST

/* An older commit time: stale blocks of an earlier log, the end of this one. */
START_TEST(stale_commit_ends_log)
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *a, *b;

	if (!(configs[_i] & (F_CSUM2 | F_CSUM3)))
		return;
	enc_init(&e, 4096, configs[_i], 1, 3);
	a = content(&e, 0xaa);
	b = content(&e, 0xbb);
	enc_txn(&e, &TXN(.n = 1, .blk = { 60 }, .data = { a }));
	enc_txn(&e, &TXN(.n = 1, .blk = { 61 }, .data = { b }, .commit = C_STALE));
	ck_assert_int_eq(replay(&e, &st), 0);
	ck_assert_uint_eq(st.transactions, 1);
	ck_assert(home_is(&e, 60, a));
	ck_assert(home_zero(&e, 61));
	free(a), free(b);
	enc_done(&e);
}
END_TEST

START_TEST(bad_data_checksum)
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *a, *b, *c;

	if (!(configs[_i] & (F_CSUM2 | F_CSUM3)))
		return;
	enc_init(&e, 4096, configs[_i], 1, 3);
	a = content(&e, 0xaa);
	b = content(&e, 0xbb);
	c = content(&e, 0xcc);
	enc_txn(&e, &TXN(.n = 3, .blk = { 70, 71, 72 }, .data = { a, b, c }, .bad_data = 2));
	/* as the kernel: every good block goes home, then recovery fails */
	ck_assert_int_eq(replay(&e, &st), -EUCLEAN);
	ck_assert(home_is(&e, 70, a));
	ck_assert(home_zero(&e, 71));
	ck_assert(home_is(&e, 72, c));
	ck_assert_uint_ne(jsb_start(&e), 0);
	free(a), free(b), free(c);
	enc_done(&e);
}
END_TEST

/* 64-bit tags name blocks past 2^32 (1 KiB blocks keep the file under 16 TiB). */
START_TEST(high_block_numbers)
{
	struct enc e;
	struct jrec_stats st;
	struct jrec_log log;
	uint64_t high = (1ULL << 32) + 9;
	uint8_t *a;

	enc_init(&e, 1024, F_64BIT | (_i ? F_CSUM3 : 0), 1, 1);
	a = content(&e, 0x64);
	enc_txn(&e, &TXN(.n = 1, .blk = { high }, .data = { a }));
	log = (struct jrec_log){ .fd = e.fd, .blocksize = 1024, .map = e.map, .nr_blocks = JLEN,
				 .fs_blocks = high + 1, .dev = "test" };
	ck_assert_int_eq(jrec_replay(&log, &st), 0);
	ck_assert_uint_eq(st.replayed, 1);
	ck_assert(home_is(&e, high, a));
	ck_assert(home_zero(&e, 9));
	free(a);
	enc_done(&e);
}
END_TEST

/* A block outside the filesystem, in a later transaction: refused before anything goes home. */
START_TEST(block_outside_fs_refused)
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *a;

	enc_init(&e, 4096, configs[_i], 1, 1);
	a = content(&e, 0x99);
	enc_txn(&e, &TXN(.n = 1, .blk = { 60 }, .data = { a }));
	enc_txn(&e, &TXN(.n = 2, .blk = { 61, JBASE + 5 }, .data = { a, a }));
	ck_assert_int_eq(replay(&e, &st), -EUCLEAN);
	ck_assert(home_zero(&e, 60));
	ck_assert(home_zero(&e, 61));
	ck_assert_uint_eq(jsb_start(&e), 1);
	free(a);
	enc_done(&e);
}
END_TEST

/* A block holding an ext4 superblock of @bs-byte blocks (at byte 1024 of block 0, or block 1). */
static uint8_t *sb_content(const struct enc *e, unsigned bs)
{
	uint8_t *b = content(e, 0x5b);
	uint8_t *sb = b + (e->bs == 1024 ? 0 : 1024);
	uint32_t log = 0;

	while ((1024U << log) < bs)
		log++;
	sb[0x38] = 0x53;		/* s_magic, le16 0xef53 */
	sb[0x39] = 0xef;
	memset(sb + 0x18, 0, 4);	/* s_log_block_size, le32 */
	sb[0x18] = (uint8_t)log;
	return b;
}

/*
 * The superblock's block takes only a superblock: anything else the
 * kernel fails its mount on. Refused before anything goes home; a
 * superblock goes home as any block. With 1 KiB blocks block 0 is the
 * boot block, which nothing journals: refused.
 */
START_TEST(superblock_block_tags)
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *a, *sb, *wrong;

	enc_init(&e, 4096, configs[_i], 1, 1);
	a = content(&e, 0x77);
	sb = sb_content(&e, 4096);
	wrong = sb_content(&e, 1024);
	enc_txn(&e, &TXN(.n = 2, .blk = { 60, 0 }, .data = { a, sb }));
	enc_txn(&e, &TXN(.n = 1, .blk = { 0 }, .data = { a }));
	ck_assert_int_eq(replay(&e, &st), -EUCLEAN);
	ck_assert(home_zero(&e, 60));
	ck_assert(home_zero(&e, 0));
	ck_assert_uint_eq(jsb_start(&e), 1);
	enc_done(&e);

	/* a superblock of another block size is no superblock of this filesystem */
	enc_init(&e, 4096, configs[_i], 1, 1);
	enc_txn(&e, &TXN(.n = 1, .blk = { 0 }, .data = { wrong }));
	ck_assert_int_eq(replay(&e, &st), -EUCLEAN);
	ck_assert(home_zero(&e, 0));
	enc_done(&e);

	enc_init(&e, 4096, configs[_i], 1, 1);
	enc_txn(&e, &TXN(.n = 2, .blk = { 60, 0 }, .data = { a, sb }));
	ck_assert_int_eq(replay(&e, &st), 0);
	ck_assert(home_is(&e, 60, a));
	ck_assert(home_is(&e, 0, sb));
	enc_done(&e);
	free(a), free(sb), free(wrong);

	enc_init(&e, 1024, configs[_i], 1, 1);
	a = content(&e, 0x77);
	sb = sb_content(&e, 1024);
	enc_txn(&e, &TXN(.n = 2, .blk = { 60, 1 }, .data = { a, sb }));
	enc_txn(&e, &TXN(.n = 1, .blk = { 0 }, .data = { a }));
	ck_assert_int_eq(replay(&e, &st), -EUCLEAN);
	ck_assert(home_zero(&e, 60));
	ck_assert(home_zero(&e, 1));
	enc_done(&e);

	enc_init(&e, 1024, configs[_i], 1, 1);
	enc_txn(&e, &TXN(.n = 2, .blk = { 60, 1 }, .data = { a, sb }));
	ck_assert_int_eq(replay(&e, &st), 0);
	ck_assert(home_is(&e, 1, sb));
	enc_done(&e);
	free(a), free(sb);
}
END_TEST

START_TEST(empty_log_untouched)
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *a;

	enc_init(&e, 4096, configs[_i], 0, 9);
	a = content(&e, 0xee);
	e.pos = 1;
	enc_txn(&e, &TXN(.n = 1, .blk = { 80 }, .data = { a }));	/* stale, s_start = 0 */
	ck_assert_int_eq(replay(&e, &st), 0);
	ck_assert(st.was_empty);
	ck_assert_uint_eq(st.replayed, 0);
	ck_assert(home_zero(&e, 80));
	free(a);
	enc_done(&e);
}
END_TEST

/* Journal superblocks that must be refused, with nothing written. */
static void refused_jsb(void (*spoil)(struct enc *e, uint8_t *sb))
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *a, *sb;

	enc_init(&e, 4096, F_CSUM3 | F_64BIT, 1, 1);
	a = content(&e, 0x42);
	enc_txn(&e, &TXN(.n = 1, .blk = { 90 }, .data = { a }));
	sb = blk_alloc(&e);
	dev_read(&e, e.map[0], sb);
	spoil(&e, sb);
	dev_write(&e, e.map[0], sb);
	ck_assert_int_eq(replay(&e, &st), -EUCLEAN);
	ck_assert(home_zero(&e, 90));
	free(sb), free(a);
	enc_done(&e);
}

static void spoil_magic(struct enc *e, uint8_t *sb)
{
	sb[0] ^= 0xff;
}

static void spoil_csum(struct enc *e, uint8_t *sb)
{
	sb[0x200] ^= 1;
}

static void spoil_feature(struct enc *e, uint8_t *sb)
{
	put32(sb + 40, get32(sb + 40) | 0x400);
	put32(sb + 0xfc, 0);
	put32(sb + 0xfc, crc(~0U, sb, 1024));
}

static void spoil_blocksize(struct enc *e, uint8_t *sb)
{
	put32(sb + 12, 1024);
	put32(sb + 0xfc, 0);
	put32(sb + 0xfc, crc(~0U, sb, 1024));
}

START_TEST(bad_journal_superblock)
{
	refused_jsb(spoil_magic);
	refused_jsb(spoil_csum);
	refused_jsb(spoil_feature);
	refused_jsb(spoil_blocksize);
}
END_TEST

/* Fast commits of the transaction after the log's end: only e2fsck replays them. */
START_TEST(fast_commit_pending_refused)
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *a, *fc;
	int pending;

	for (pending = 0; pending < 2; pending++) {
		enc_init(&e, 4096, F_CSUM3 | F_64BIT | F_FC, 1, 20);
		a = content(&e, 0xfc);
		enc_txn(&e, &TXN(.n = 1, .blk = { 95 }, .data = { a }));
		fc = blk_alloc(&e);
		fc[0] = 0x09;		/* head tag, le16 */
		fc[2] = 8;		/* length */
		/* tid: the one after the log's last, or a stale one */
		fc[8] = pending ? 21 : 19;
		dev_write(&e, e.map[JLEN - e.nr_fc + 1], fc);
		ck_assert_int_eq(replay(&e, &st), pending ? -EUCLEAN : 0);
		if (pending)
			ck_assert(home_zero(&e, 95));
		else
			ck_assert(home_is(&e, 95, a));
		free(fc), free(a);
		enc_done(&e);
	}
}
END_TEST

/* async_commit: a bad commit block is an interrupted commit, not corruption. */
START_TEST(async_commit_torn)
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *a, *b;

	enc_init(&e, 4096, F_CSUM3 | F_ASYNC, 1, 3);
	a = content(&e, 0xaa);
	b = content(&e, 0xbb);
	enc_txn(&e, &TXN(.n = 1, .blk = { 60 }, .data = { a }));
	enc_txn(&e, &TXN(.n = 1, .blk = { 61 }, .data = { b }, .commit = C_BADCSUM));
	ck_assert_int_eq(replay(&e, &st), 0);
	ck_assert_uint_eq(st.transactions, 1);
	ck_assert(home_is(&e, 60, a));
	ck_assert(home_zero(&e, 61));
	free(a), free(b);
	enc_done(&e);
}
END_TEST

/*
 * v1 checksums (crc32_be over descriptors and data, in the commit block):
 * a mismatch ends the log; without async_commit the kernel fails.
 */
START_TEST(v1_checksums)
{
	struct enc e;
	struct jrec_stats st;
	bool async = _i;
	uint8_t *a, *b, *c;

	enc_init(&e, 4096, F_64BIT | (async ? F_ASYNC : 0), 1, 3);
	e.v1 = true;
	write_jsb(&e, 1, 3);
	a = content(&e, 0xaa);
	b = content(&e, 0xbb);
	c = content(&e, 0xcc);
	enc_txn(&e, &TXN(.n = 2, .blk = { 60, 61 }, .data = { a, b }));
	enc_txn(&e, &TXN(.n = 1, .blk = { 62 }, .data = { b }));
	enc_txn(&e, &TXN(.n = 2, .blk = { 60, 63 }, .data = { c, c }, .commit = C_BADCSUM));
	ck_assert_int_eq(replay(&e, &st), async ? 0 : -EUCLEAN);
	ck_assert_uint_eq(st.transactions, 2);
	ck_assert(home_is(&e, 60, a));
	ck_assert(home_is(&e, 61, b));
	ck_assert(home_is(&e, 62, b));
	ck_assert(home_zero(&e, 63));
	free(a), free(b), free(c);
	enc_done(&e);
}
END_TEST

/*
 * A crash after the blocks went home but before the log was emptied:
 * the next mount replays the same log again, to the same bytes.
 */
START_TEST(replay_twice_same_result)
{
	struct enc e;
	struct jrec_stats st;
	uint8_t *a, *b, *c, *sb;

	enc_init(&e, 4096, configs[_i], JLEN - 2, 40);
	a = content(&e, 0xa0);
	b = content(&e, 0xb0);
	c = content(&e, 0xc0);
	enc_txn(&e, &TXN(.n = 2, .blk = { 10, 11 }, .data = { a, b }));
	enc_txn(&e, &TXN(.n = 1, .blk = { 10 }, .data = { c }, .nrv = 1, .rv = { 11 }));
	sb = blk_alloc(&e);
	dev_read(&e, e.map[0], sb);
	ck_assert_int_eq(replay(&e, &st), 0);
	dev_write(&e, e.map[0], sb);		/* the log was never emptied */
	ck_assert_int_eq(replay(&e, &st), 0);
	ck_assert_uint_eq(st.transactions, 2);
	ck_assert(home_is(&e, 10, c));
	ck_assert(home_zero(&e, 11));
	check_jsb_empty(&e, 43);
	free(a), free(b), free(c), free(sb);
	enc_done(&e);
}
END_TEST

static Suite *jrecover_suite(void)
{
	Suite *s = suite_create("jrecover");
	TCase *tc = tcase_create("replay");

	tcase_add_loop_test(tc, single_transaction, 0, NR_CONFIGS);
	tcase_add_loop_test(tc, several_transactions_in_order, 0, NR_CONFIGS);
	tcase_add_loop_test(tc, ring_wraps, 0, NR_CONFIGS);
	tcase_add_loop_test(tc, escaped_block, 0, NR_CONFIGS);
	tcase_add_loop_test(tc, high_block_numbers, 0, 2);
	tcase_add_loop_test(tc, empty_log_untouched, 0, NR_CONFIGS);
	tcase_add_loop_test(tc, replay_twice_same_result, 0, NR_CONFIGS);
	suite_add_tcase(s, tc);
	tc = tcase_create("revoke");
	tcase_add_loop_test(tc, revokes_across_transactions, 0, NR_CONFIGS);
	suite_add_tcase(s, tc);
	tc = tcase_create("torn");
	tcase_add_loop_test(tc, torn_last_transaction, 0, NR_CONFIGS);
	tcase_add_loop_test(tc, bad_commit_checksum, 0, NR_CONFIGS);
	tcase_add_loop_test(tc, incomplete_commit_block, 0, NR_CONFIGS);
	tcase_add_loop_test(tc, stale_commit_ends_log, 0, NR_CONFIGS);
	tcase_add_loop_test(tc, bad_data_checksum, 0, NR_CONFIGS);
	tcase_add_test(tc, async_commit_torn);
	tcase_add_loop_test(tc, v1_checksums, 0, 2);
	suite_add_tcase(s, tc);
	tc = tcase_create("refuse");
	tcase_add_loop_test(tc, block_outside_fs_refused, 0, NR_CONFIGS);
	tcase_add_loop_test(tc, superblock_block_tags, 0, NR_CONFIGS);
	tcase_add_test(tc, bad_journal_superblock);
	tcase_add_test(tc, fast_commit_pending_refused);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run(jrecover_suite());
}
