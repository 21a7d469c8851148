/* SPDX-License-Identifier: GPL-2.0-or-later */
/* lib/'s public interface: its parts in include/wbcfs/lib/. */
#ifndef WBCFS_LIB_H
#define WBCFS_LIB_H

#include "wbcfs/lib/clock.h"
#include "wbcfs/lib/list.h"
#include "wbcfs/lib/lockstat.h"
#include "wbcfs/lib/msg.h"
#include "wbcfs/lib/times.h"

#endif
