#ifndef BERTEMBED_CI_SYS_MMAN_H
#define BERTEMBED_CI_SYS_MMAN_H
#include <stddef.h>
/* The values of macOS's <sys/mman.h> (its SDK defines MAP_ANONYMOUS as MAP_ANON). */
#define PROT_READ 0x01
#define PROT_WRITE 0x02
#define MAP_SHARED 0x0001
#define MAP_ANON 0x1000
#define MAP_ANONYMOUS MAP_ANON
#define MAP_FAILED ((void *)-1)
typedef long long off_t;
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t offset);
#endif
