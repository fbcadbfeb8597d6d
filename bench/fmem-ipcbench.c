/* fmem-ipcbench.c - service-mode benchmark (see wl_ipc.c). Standalone until
 * fmem-bench dispatches --workload ipc to fmem_bench_ipc(). */
int fmem_bench_ipc(int argc, char **argv);

int main(int argc, char **argv)
{
    return fmem_bench_ipc(argc, argv);
}
