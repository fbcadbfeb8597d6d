/* cpu_relax.h - the pause hint for spin-wait loops. */
#ifndef FMEM_CPU_RELAX_H
#define FMEM_CPU_RELAX_H

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
