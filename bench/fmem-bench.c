int bench_placeholder_fmem_bench;
int main(void){return 0;}
