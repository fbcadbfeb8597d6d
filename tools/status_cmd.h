/* status_cmd.h - the `fmem status`, `fmem mnode` and `fmem daemon`
 * subcommands of the fmem tool (status_cmd.c). */
#ifndef FMEM_SVC_STATUS_CMD_H
#define FMEM_SVC_STATUS_CMD_H

/* argv: what follows "status". Returns the exit code. */
int cmd_status(int argc, char **argv);
/* Replace this process by the daemon `prog` (found next to this program,
 * then on PATH) with argv[1..]. Returns only on failure. */
int cmd_exec_daemon(const char *prog, int argc, char **argv);

#endif
