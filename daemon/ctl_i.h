/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The control directory's private interface: ctl.c (the nodes, the FUSE
 * handlers, the tunable and trace files) asks ctl_stats.c for the content
 * of the statistics files at open.
 */
#ifndef WBCFS_CTL_I_H
#define WBCFS_CTL_I_H

#include "wbcfs/daemon/ctl.h"

struct wbfs;

/* Each appends its file's text to @b. Returns 0 or -ENOMEM. */
int ctl_gen_vmstat(struct wbfs *w, struct ctl_buf *b);
int ctl_gen_zoneinfo(struct wbfs *w, struct ctl_buf *b);
int ctl_gen_bdi(struct wbfs *w, struct ctl_buf *b);
int ctl_gen_flusher(struct wbfs *w, struct ctl_buf *b);
/* lockstat: a state line, a header, one line per lock class. Or -errno. */
int ctl_gen_lockstat(struct ctl_buf *b);

#endif
