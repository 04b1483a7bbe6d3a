/* Every C header of the kernel (src/bertembed/_core/csrc/) in one translation
 * unit, for the syntax-only platform compiles of .ci/msvc-shaped.sh: with
 * Python's headers where the target's are at hand (Windows), else with
 * Py_ssize_t declared as CPython declares it on an LP64 system (macOS). The
 * kernel's C takes nothing else from Python.h. */
#ifdef BE_DRIVER_PYTHON
#include <Python.h>
#else
#include <stddef.h>
typedef long Py_ssize_t;
#endif

#include "be_runtime.h"
#include "be_threads.h"
#include "be_rows.h"
#include "be_convert.h"
