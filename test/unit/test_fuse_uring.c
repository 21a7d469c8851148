// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The io_uring transport's message handling, without a kernel: a request
 * laid out in a ring entry (fuse_in_header and op header in the header
 * buffer, the rest in the payload) becomes the flat message libfuse
 * reads, built in the headroom in front of the payload so that WRITE
 * data is not moved; malformed headers are refused; a reply written as
 * libfuse writes it (header, then arguments) lands in the entry as the
 * kernel reads it (header in in_out, every argument in the payload,
 * payload_sz set), and one too large for the payload becomes -EIO.
 *
 * The transport is per connection (struct furing): a connection without
 * one is not active and has no shape, stopping none is harmless, and a
 * reply written by a thread that serves no ring entry goes to the device.
 */
#include <check.h>
#include "helpers.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <stdlib.h>
#include <string.h>

#include "../../fuse/fuse_i.h"

#define PAYLOAD 8192

static struct furing_req_header hdr;
static char *area, *payload;

static void setup(void)
{
	memset(&hdr, 0, sizeof(hdr));
	area = calloc(1, FURING_HEADROOM + PAYLOAD);
	ck_assert_ptr_nonnull(area);
	payload = area + FURING_HEADROOM;
}

static void teardown(void)
{
	free(area);
}

/* What the kernel puts in an entry for a request. */
static void t_ring_request(uint32_t opcode, uint64_t unique, const void *op, size_t op_len,
			   const void *data, size_t data_len)
{
	struct fuse_in_header in = {
		.len = (uint32_t)(sizeof(in) + op_len + data_len),
		.opcode = opcode,
		.unique = unique,
		.nodeid = 5,
	};

	memcpy(hdr.in_out, &in, sizeof(in));
	memcpy(hdr.op_in, op, op_len);
	memcpy(payload, data, data_len);
	hdr.ring_ent_in_out.commit_id = unique;
	hdr.ring_ent_in_out.payload_sz = (uint32_t)data_len;
}

START_TEST(write_in_place)
{
	/* a synchronous write: its O_SYNC is how wbcfs knows to sync it */
	struct fuse_write_in wi = { .fh = 9, .offset = 4096, .size = 5000,
				    .flags = O_WRONLY | O_SYNC };
	char data[5000];
	const struct fuse_in_header *in;
	size_t len = 0;
	char *msg;

	memset(data, 'w', sizeof(data));
	t_ring_request(FUSE_WRITE, 42, &wi, sizeof(wi), data, sizeof(data));
	msg = furing_req_flatten(&hdr, payload, PAYLOAD, &len);
	ck_assert_ptr_nonnull(msg);
	ck_assert_uint_eq(len, sizeof(*in) + sizeof(wi) + sizeof(data));
	/* the data is where the kernel put it: only the headers were written */
	ck_assert_ptr_eq(msg + sizeof(*in) + sizeof(wi), payload);
	in = (const void *)msg;
	ck_assert_uint_eq(in->opcode, FUSE_WRITE);
	ck_assert_uint_eq(in->unique, 42);
	ck_assert_uint_eq(in->len, len);
	ck_assert_mem_eq(msg + sizeof(*in), &wi, sizeof(wi));
	ck_assert_uint_eq(((const struct fuse_write_in *)(msg + sizeof(*in)))->flags,
			  O_WRONLY | O_SYNC);
	ck_assert_mem_eq(payload, data, sizeof(data));
}
END_TEST

START_TEST(no_op_header)
{
	const char name[] = "a-file-name";
	size_t len = 0;
	char *msg;

	/* LOOKUP: an empty first argument, the name in the payload */
	t_ring_request(FUSE_LOOKUP, 7, NULL, 0, name, sizeof(name));
	msg = furing_req_flatten(&hdr, payload, PAYLOAD, &len);
	ck_assert_ptr_nonnull(msg);
	ck_assert_uint_eq(len, sizeof(struct fuse_in_header) + sizeof(name));
	ck_assert_str_eq(msg + sizeof(struct fuse_in_header), name);
}
END_TEST

START_TEST(malformed)
{
	struct fuse_in_header *in = (void *)hdr.in_out;
	size_t len = 0;
	char big[200] = { 0 };

	t_ring_request(FUSE_GETATTR, 8, big, 16, NULL, 0);
	hdr.ring_ent_in_out.payload_sz = 100;		/* more than the length allows */
	ck_assert_ptr_null(furing_req_flatten(&hdr, payload, PAYLOAD, &len));
	hdr.ring_ent_in_out.payload_sz = PAYLOAD + 1;	/* more than the buffer */
	in->len = sizeof(*in) + PAYLOAD + 1;
	ck_assert_ptr_null(furing_req_flatten(&hdr, payload, PAYLOAD, &len));
	hdr.ring_ent_in_out.payload_sz = 0;		/* an op header over 128 bytes */
	in->len = sizeof(*in) + sizeof(big);
	ck_assert_ptr_null(furing_req_flatten(&hdr, payload, PAYLOAD, &len));
}
END_TEST

START_TEST(reply_args_in_payload)
{
	struct fuse_out_header out = { .len = sizeof(out) + 16 + 5, .unique = 42 };
	char a[16], b[5];
	struct iovec iov[3] = { { &out, sizeof(out) }, { a, sizeof(a) }, { b, sizeof(b) } };
	const struct fuse_out_header *got = (const void *)hdr.in_out;

	memset(a, 'a', sizeof(a));
	memset(b, 'b', sizeof(b));
	ck_assert_int_eq(furing_reply_fill(&hdr, payload, PAYLOAD, iov, 3), (ssize_t)out.len);
	ck_assert_uint_eq(got->unique, 42);
	ck_assert_int_eq(got->error, 0);
	ck_assert_uint_eq(hdr.ring_ent_in_out.payload_sz, sizeof(a) + sizeof(b));
	ck_assert_mem_eq(payload, a, sizeof(a));
	ck_assert_mem_eq(payload + sizeof(a), b, sizeof(b));
}
END_TEST

START_TEST(reply_error_and_too_big)
{
	struct fuse_out_header out = { .len = sizeof(out), .error = -ENOENT, .unique = 3 };
	struct iovec iov[2] = { { &out, sizeof(out) }, { NULL, 0 } };
	const struct fuse_out_header *got = (const void *)hdr.in_out;
	static char big[PAYLOAD + 1];

	ck_assert_int_eq(furing_reply_fill(&hdr, payload, PAYLOAD, iov, 1), sizeof(out));
	ck_assert_int_eq(got->error, -ENOENT);
	ck_assert_uint_eq(hdr.ring_ent_in_out.payload_sz, 0);

	out = (struct fuse_out_header){ .len = sizeof(out) + sizeof(big), .unique = 4 };
	iov[1] = (struct iovec){ big, sizeof(big) };
	ck_assert_int_eq(furing_reply_fill(&hdr, payload, PAYLOAD, iov, 2), -E2BIG);
	ck_assert_uint_eq(got->unique, 4);
	ck_assert_int_eq(got->error, -EIO);
	ck_assert_uint_eq(hdr.ring_ent_in_out.payload_sz, 0);

	out.len = 8;	/* shorter than a header */
	iov[0].iov_len = 8;
	ck_assert_int_eq(furing_reply_fill(&hdr, payload, PAYLOAD, iov, 1), -EINVAL);
}
END_TEST

START_TEST(no_transport)
{
	struct fuse_out_header out = { .len = sizeof(out), .unique = 6 };
	struct iovec iov = { &out, sizeof(out) };
	unsigned long requests = 1;
	unsigned queues = 1, ents = 1;
	struct furing *fr = NULL;
	ssize_t ret = 0;

	ck_assert(!furing_active(fr));
	furing_shape(fr, &queues, &ents, &requests);
	ck_assert_uint_eq(queues, 0);
	ck_assert_uint_eq(ents, 0);
	ck_assert_uint_eq(requests, 0);
	furing_stop(fr);
	/* not a ring thread: the reply is the caller's to write on the device */
	ck_assert(!furing_reply(&iov, 1, &ret));
	ck_assert_ptr_null(furing_hold(&iov, 1));
	/* bad shapes are refused before anything is made */
	ck_assert_int_eq(furing_start(&fr, NULL, -1, PAYLOAD, 0, 1, 0, NULL, NULL, NULL), -EINVAL);
	ck_assert_ptr_null(fr);
}
END_TEST

static Suite *fuse_uring_suite(void)
{
	Suite *s = suite_create("fuse_uring");
	TCase *tc;

	tc = t_tcase(s, "messages", write_in_place, no_op_header, malformed, reply_args_in_payload,
		     reply_error_and_too_big);
	tcase_add_checked_fixture(tc, setup, teardown);
	t_tcase(s, "connection", no_transport);
	return s;
}

int main(void)
{
	return t_run(fuse_uring_suite());
}
