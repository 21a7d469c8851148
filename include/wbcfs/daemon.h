/* SPDX-License-Identifier: GPL-2.0-or-later */
/* daemon/'s public interface: its parts in include/wbcfs/daemon/. */
#ifndef WBCFS_DAEMON_H
#define WBCFS_DAEMON_H

#include "wbcfs/daemon/ctl.h"
#include "wbcfs/daemon/tunables.h"

#endif
