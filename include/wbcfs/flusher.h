/* SPDX-License-Identifier: GPL-2.0-or-later */
/* flusher/'s public interface: its parts in include/wbcfs/flusher/. */
#ifndef WBCFS_FLUSHER_H
#define WBCFS_FLUSHER_H

#include "wbcfs/flusher/bdi.h"
#include "wbcfs/flusher/pdflush.h"

#endif
