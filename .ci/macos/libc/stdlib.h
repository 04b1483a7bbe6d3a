#ifndef BERTEMBED_CI_STDLIB_H
#define BERTEMBED_CI_STDLIB_H
#include <stddef.h>
void *malloc(size_t size);
void *calloc(size_t count, size_t size);
void *realloc(void *ptr, size_t size);
void free(void *ptr);
char *getenv(const char *name);
int posix_memalign(void **memptr, size_t alignment, size_t size);
#endif
