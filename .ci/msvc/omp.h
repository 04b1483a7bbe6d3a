/* The OpenMP 2.0 C API (OpenMP C and C++ Application Program Interface,
 * version 2.0, March 2002, chapter 3 and appendix D): what MSVC's /openmp
 * provides, and nothing newer. Used by .ci/msvc-shaped.sh to compile the
 * kernel the way MSVC sees it; not a runtime (the compile is syntax only). */
#ifndef BERTEMBED_CI_OMP_2_0_H
#define BERTEMBED_CI_OMP_2_0_H

typedef void *omp_lock_t;
typedef void *omp_nest_lock_t;

/* 3.1 execution environment */
void omp_set_num_threads(int num_threads);
int omp_get_num_threads(void);
int omp_get_max_threads(void);
int omp_get_thread_num(void);
int omp_get_num_procs(void);
int omp_in_parallel(void);
void omp_set_dynamic(int dynamic_threads);
int omp_get_dynamic(void);
void omp_set_nested(int nested);
int omp_get_nested(void);

/* 3.2 locks */
void omp_init_lock(omp_lock_t *lock);
void omp_destroy_lock(omp_lock_t *lock);
void omp_set_lock(omp_lock_t *lock);
void omp_unset_lock(omp_lock_t *lock);
int omp_test_lock(omp_lock_t *lock);
void omp_init_nest_lock(omp_nest_lock_t *lock);
void omp_destroy_nest_lock(omp_nest_lock_t *lock);
void omp_set_nest_lock(omp_nest_lock_t *lock);
void omp_unset_nest_lock(omp_nest_lock_t *lock);
int omp_test_nest_lock(omp_nest_lock_t *lock);

/* 3.3 timing */
double omp_get_wtime(void);
double omp_get_wtick(void);

#endif
