// SPDX-License-Identifier: GPL-2.0-or-later
/* Message streams: see include/wbcfs/lib/msg.h. */
#include "wbcfs/lib/msg.h"

static __thread FILE *msg_to;

FILE *msg_stream(void)
{
	return msg_to ? msg_to : stderr;
}

void msg_redirect(FILE *f)
{
	msg_to = f;
}

void msg_dev_vmsg(const char *dev, const char *tail, const char *fmt, va_list ap)
{
	FILE *f = msg_stream();

	fprintf(f, "wbcfs: %s: ", dev);
	vfprintf(f, fmt, ap);
	fputs(tail, f);
}

void msg_dev(const char *dev, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	msg_dev_vmsg(dev, "\n", fmt, ap);
	va_end(ap);
}
