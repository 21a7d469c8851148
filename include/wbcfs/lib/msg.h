/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Where a mount's messages go: standard error, or a stream the thread
 * chose (the daemon, while it mounts a joiner's device, tees them to the
 * joiner's standard error). Every layer writes its messages here; only
 * the daemon redirects them.
 */
#ifndef WBCFS_LIB_MSG_H
#define WBCFS_LIB_MSG_H

#include <stdarg.h>
#include <stdio.h>

/** This thread's message stream: the one msg_redirect() set, or stderr. */
FILE *msg_stream(void);

/** Send this thread's messages to @f (NULL: back to stderr). */
void msg_redirect(FILE *f);

/** "wbcfs: @dev: " then @fmt with @ap, then @tail ("\n", or more words). */
void msg_dev_vmsg(const char *dev, const char *tail, const char *fmt, va_list ap);

/** msg_dev_vmsg with "\n" for a tail. */
void msg_dev(const char *dev, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
