/* The numbers the kernel and its Python shim share, declared here only.
 *
 * _kernel.pxd declares them to Cython as cpdef enums, so that Python reads
 * them from the module under the same names (KIND_F32 ... KIND_I8,
 * RULE_ABSOLUTE ... RULE_NONE, ISA_BASELINE ... ISA_NEON); the shim reads
 * them from there (dtypes.py, positions.py, knobs.py names the ISAs) and
 * never writes a value itself.
 */
#ifndef BERTEMBED_KINDS_H
#define BERTEMBED_KINDS_H

/* Storage kinds of tables and results: how the bytes of a row are read or
 * written. BE_BF16 is the top half of a float32 (ml_dtypes.bfloat16, or its
 * raw uint16 bits); BE_I8 is an int8 row with a float32 scale and offset
 * (value = q * scale + offset), for token tables only. Adding a kind means a
 * row in dtypes.py and its load and store code in be_row_body.h (and
 * be_neon.h, be_convert.h). */
enum { BE_F32 = 0, BE_F64 = 1, BE_F16 = 2, BE_BF16 = 3, BE_I8 = 4 };

/* Position rules: which position row token s of a sequence reads when the
 * call gives no position ids (see positions.py). BE_RULE_ABSOLUTE: row
 * offset + s; BE_RULE_PADDING: RoBERTa's numbering from the padding id;
 * BE_RULE_NONE: there is no position table. */
enum { BE_RULE_ABSOLUTE = 0, BE_RULE_PADDING = 1, BE_RULE_NONE = 2 };

/* Instruction sets of the row kernels (be_rows.h), x86 narrowest first,
 * then aarch64's. knobs.py names them (ISA_NAMES[value]), as BERTEMBED_ISA
 * spells them. Adding one means its value here, its name there and its
 * body in be_rows.h. */
enum { BE_ISA_BASELINE = 0, BE_ISA_AVX2 = 1, BE_ISA_AVX512 = 2, BE_ISA_NEON = 3, BE_ISA_COUNT = 4 };

#endif
