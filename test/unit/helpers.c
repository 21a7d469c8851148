// SPDX-License-Identifier: GPL-2.0-or-later
/* Shared unit-test helpers: fake clock, temporary files. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "wbcfs/lib/clock.h"
#include "helpers.h"

static uint64_t t_now;

static uint64_t t_clock_read(void)
{
	return t_now;
}

void t_clock_fake(uint64_t start_ms)
{
	t_now = start_ms;
	clock_set_fake(t_clock_read);
}

void t_clock_advance(uint64_t ms)
{
	t_now += ms;
}

uint64_t t_clock_now(void)
{
	return t_now;
}

void t_clock_real(void)
{
	clock_set_fake(NULL);
}

int t_tmpfile(char *path, uint64_t size)
{
	const char *dir = getenv("TMPDIR");
	int fd;

	snprintf(path, 64, "%s/wbcfs-test-XXXXXX", dir ? dir : "/var/tmp");
	fd = mkstemp(path);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)size) < 0) {
		close(fd);
		unlink(path);
		return -1;
	}
	return fd;
}

int t_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
