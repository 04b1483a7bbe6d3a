/* _abs64 of MSVC's <stdlib.h> (UCRT reference, "abs, labs, llabs,
   _abs64"); Wine's does not declare it. */
#include_next <stdlib.h>

#ifndef BERTEMBED_CI_STDLIB_H
#define BERTEMBED_CI_STDLIB_H
__int64 __cdecl _abs64(__int64 x);
#endif
