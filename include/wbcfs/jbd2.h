/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * jbd2/, the journal's own layer, as ext4/ sees it: the on-disk format
 * (jbd2/format.h), the block tables (jtab.h), the log writer (log.h),
 * recovery (recover.h) and crc32c. It knows nothing of ext4/: the log
 * writer and recovery reach the device through the caller's descriptors
 * (and, for the writer, its fault and flush hooks). Internals: jbd2/jbd2_i.h.
 */
#ifndef WBCFS_JBD2_H
#define WBCFS_JBD2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wbcfs/jbd2/format.h"
#include "wbcfs/jbd2/jtab.h"
#include "wbcfs/jbd2/log.h"
#include "wbcfs/jbd2/recover.h"

#endif
