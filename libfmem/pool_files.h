/* pool_files.h - create and open the files of a named pool (shm:, file:)
 * safely: see pool_files.c. Used by the shared-memory transport. */
#ifndef FMEM_POOL_FILES_H
#define FMEM_POOL_FILES_H

#include <stdbool.h>
#include <sys/types.h>

#include "transport.h"

/* Open the metadata file p->path and its data file, or create both when
 * absent and p->create (sized p->meta_size / p->data_size, space
 * reserved); *made says which. 0 or FMEM_E* with errno set: ENOSPC (no
 * room), ELOOP (a symbolic link), EEXIST (a foreign file where a new pool's
 * data file goes), EPERM (refused owner or mode, see pool_files_check). */
int pool_files_open(const struct shm_params *p, int *meta_fd, int *data_fd, int *made);
/* 0 if the open file `fd` may back a pool: a regular file (else
 * FMEM_ECORRUPT) and, with check_owner, owned by `owner` or this process's
 * user and writable by no one else (else FMEM_EIO, errno EPERM). */
int pool_files_check(int fd, bool check_owner, uid_t owner);
/* Remove a named pool's two files. */
void pool_files_unlink(const char *path);

#endif
