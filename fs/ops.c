// SPDX-License-Identifier: GPL-2.0-or-later
/* placeholder: being written */
typedef int wbcfs_placeholder_t;
