/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * jbd2/ internals. What ext4/ sees is in include/wbcfs/jbd2.h.
 */
#ifndef WBCFS_JBD2_JBD2_I_H
#define WBCFS_JBD2_JBD2_I_H

#include "wbcfs/jbd2.h"
#include "wbcfs/blkdev.h"
#include "wbcfs/lib/msg.h"

#endif
