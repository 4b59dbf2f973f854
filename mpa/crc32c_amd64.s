//go:build !purego

#include "textflag.h"

// CRC32c kernels; crc32c_amd64.go describes them. Each takes and returns the
// raw CRC register.

// func crc32cSingle(c uint32, p []byte) uint32
TEXT ·crc32cSingle(SB), NOSPLIT, $0-36
	MOVL c+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	CMPQ CX, $8
	JB   tail

words:
	CRC32Q (SI), AX
	ADDQ   $8, SI
	SUBQ   $8, CX
	CMPQ   CX, $8
	JAE    words

tail:
	TESTQ  $4, CX
	JZ     tail2
	CRC32L (SI), AX
	ADDQ   $4, SI

tail2:
	TESTQ  $2, CX
	JZ     tail1
	CRC32W (SI), AX
	ADDQ   $2, SI

tail1:
	TESTQ  $1, CX
	JZ     done
	CRC32B (SI), AX

done:
	MOVL AX, ret+32(FP)
	RET

// shiftK sets k to K(q) = x^(64q-33) mod P for 2 <= q < 2+64*128 from the
// tables at R8 and R9 (crc32c_amd64.go): one load for q < 66, else a
// carry-less multiply and a crc32 step. It clobbers q, R10, R13 and tmp.
#define shiftK(q, k, tmp) \
	SUBQ      $2, q \
	MOVQ      q, R10 \
	ANDQ      $63, q \
	MOVQ      (R8)(q*8), k \
	SHRQ      $6, R10 \
	JZ        7(PC) \
	MOVQ      (R9)(R10*8), tmp \
	PCLMULQDQ $0x00, tmp, k \
	MOVQ      k, R10 \
	XORL      R13, R13 \
	CRC32Q    R10, R13 \
	MOVQ      R13, k

// func crc32cTriple(c uint32, p []byte) uint32
// len(p) <= 64 KiB + 32; below 32 octets it is crc32cSingle.
TEXT ·crc32cTriple(SB), NOSPLIT, $0-36
	MOVQ p_len+16(FP), CX
	CMPQ CX, $32
	JAE  triple
	JMP  ·crc32cSingle(SB)

triple:
	MOVL c+0(FP), AX
	MOVQ p_base+8(FP), SI

	// The first len%8 octets, so that whole words remain.
	TESTQ  $1, CX
	JZ     head2
	CRC32B (SI), AX
	INCQ   SI

head2:
	TESTQ  $2, CX
	JZ     head4
	CRC32W (SI), AX
	ADDQ   $2, SI

head4:
	TESTQ  $4, CX
	JZ     split
	CRC32L (SI), AX
	ADDQ   $4, SI

split:
	// m words (at least 4): streams A and B take L = (m-1)/3 each, C the
	// remaining m-2L (L+1 to L+3).
	SHRQ  $3, CX
	LEAQ  -1(CX), DX
	MOVL  $0xaaaaaaab, R8
	IMULQ R8, DX
	SHRQ  $33, DX        // L
	MOVQ  CX, R11
	SUBQ  DX, R11        // m-L: words after A's crc, A's shift
	MOVQ  R11, R12
	SUBQ  DX, R12        // m-2L: words after B's crc, B's shift, C's length

	// The shift constants depend on the length only; they are computed
	// while the streams run. X0 = K(m-L), X2 = K(m-2L).
	LEAQ  ·crc32cKlo(SB), R8
	LEAQ  ·crc32cKhi(SB), R9
	shiftK(R11, X0, X1)
	MOVQ  R12, R11
	shiftK(R11, X2, X3)

	LEAQ (SI)(DX*8), DI  // stream B
	LEAQ (DI)(DX*8), R9  // stream C
	XORL BX, BX
	XORL R8, R8
	MOVQ DX, CX

three:
	CRC32Q (SI), AX
	CRC32Q (DI), BX
	CRC32Q (R9), R8
	ADDQ   $8, SI
	ADDQ   $8, DI
	ADDQ   $8, R9
	DECQ   CX
	JNZ    three

	// C's words past L but its last: 0 to 2.
	SUBQ DX, R12
	DECQ R12
	JZ   merge

rest:
	CRC32Q (R9), R8
	ADDQ   $8, R9
	DECQ   R12
	JNZ    rest

merge:
	// A·x^(64(m-L)) + B·x^(64(m-2L)) as a 64-bit word d, whose d·x^32 the
	// last crc32 step of C adds in.
	MOVQ      AX, X1
	PCLMULQDQ $0x00, X0, X1
	MOVQ      BX, X3
	PCLMULQDQ $0x00, X2, X3
	PXOR      X3, X1
	MOVQ      X1, R10
	XORQ      (R9), R10
	CRC32Q    R10, R8
	MOVL      R8, ret+32(FP)
	RET

// fold64 folds the four 128-bit lanes of acc forward by the distance whose
// constants are broadcast in k, and adds next: acc = acc·x^d + next.
#define fold64(k, acc, next, tmp) \
	VPCLMULQDQ $0x00, k, acc, tmp \
	VPCLMULQDQ $0x11, k, acc, acc \
	VPTERNLOGQ $0x96, next, tmp, acc

// reduce leaves in AX the CRC register of the 128-bit lanes of Z0 (R8 holds
// crc32cFoldK): lanes 0-2 are folded onto lane 3, then two crc32 steps reduce
// the 128 bits v: crc32q(crc32q(0, v.lo), v.hi) = v·x^32 mod P.
#define reduce \
	VMOVDQU64     48(R8), Z5 \
	VPCLMULQDQ    $0x00, Z5, Z0, Z6 \
	VPCLMULQDQ    $0x11, Z5, Z0, Z7 \
	VEXTRACTI32X4 $3, Z0, X1 \
	VPTERNLOGQ    $0x96, Z1, Z6, Z7 \
	VEXTRACTI64X4 $1, Z7, Y6 \
	VPXORQ        Y6, Y7, Y7 \
	VEXTRACTI32X4 $1, Y7, X6 \
	VPXORQ        X6, X7, X7 \
	VMOVQ         X7, DX \
	VPEXTRQ       $1, X7, R9 \
	XORL          AX, AX \
	CRC32Q        DX, AX \
	CRC32Q        R9, AX \
	VZEROUPPER

// func crc32cFold(c uint32, p []byte) uint32
TEXT ·crc32cFold(SB), NOSPLIT, $0-36
	MOVL c+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX

	// The first len%64 octets through the crc32 instruction.
	MOVQ CX, DX
	ANDQ $63, DX
	SUBQ DX, CX          // octets in 64-octet blocks
	CMPQ DX, $8
	JB   head4

head8:
	CRC32Q (SI), AX
	ADDQ   $8, SI
	SUBQ   $8, DX
	CMPQ   DX, $8
	JAE    head8

head4:
	TESTQ  $4, DX
	JZ     head2
	CRC32L (SI), AX
	ADDQ   $4, SI

head2:
	TESTQ  $2, DX
	JZ     head1
	CRC32W (SI), AX
	ADDQ   $2, SI

head1:
	TESTQ  $1, DX
	JZ     blocks
	CRC32B (SI), AX
	INCQ   SI

blocks:
	TESTQ CX, CX
	JZ    short

	// The CRC so far goes into the first 32 bits of the first block:
	// c·x^(8n) = (c·x^(8n-32))·x^32.
	LEAQ      ·crc32cFoldK(SB), R8
	VMOVD     AX, X4
	VPXORQ    (SI), Z4, Z0
	CMPQ      CX, $256
	JB        one
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	ADDQ      $256, SI
	SUBQ      $256, CX
	CMPQ      CX, $256
	JB        four

	VBROADCASTI32X4 (R8), Z5

loop4:
	fold64(Z5, Z0, (SI), Z6)
	fold64(Z5, Z1, 64(SI), Z7)
	fold64(Z5, Z2, 128(SI), Z8)
	fold64(Z5, Z3, 192(SI), Z9)
	ADDQ $256, SI
	SUBQ $256, CX
	CMPQ CX, $256
	JAE  loop4

four:
	// Z0 = Z0·x^1024 + Z2 and Z1 = Z1·x^1024 + Z3, then Z0 = Z0·x^512 + Z1.
	VBROADCASTI32X4 16(R8), Z5
	fold64(Z5, Z0, Z2, Z6)
	fold64(Z5, Z1, Z3, Z7)
	VBROADCASTI32X4 32(R8), Z5
	fold64(Z5, Z0, Z1, Z6)
	TESTQ           CX, CX
	JZ              lanes

loop1:
	fold64(Z5, Z0, (SI), Z6)
	ADDQ $64, SI
	SUBQ $64, CX
	JNZ  loop1
	JMP  lanes

one:
	ADDQ            $64, SI
	SUBQ            $64, CX
	JZ              lanes
	VBROADCASTI32X4 32(R8), Z5
	JMP             loop1

lanes:
	reduce

short:
	MOVL AX, ret+32(FP)
	RET

// func crc32cFoldCopy(c uint32, dst, src []byte) uint32
// crc32cFold of src that also copies it to dst; len(dst) >= len(src).
TEXT ·crc32cFoldCopy(SB), NOSPLIT, $0-60
	MOVL c+0(FP), AX
	MOVQ dst_base+8(FP), DI
	MOVQ src_base+32(FP), SI
	MOVQ src_len+40(FP), CX

	MOVQ CX, DX
	ANDQ $63, DX
	SUBQ DX, CX
	CMPQ DX, $8
	JB   chead4

chead8:
	MOVQ   (SI), R10
	CRC32Q R10, AX
	MOVQ   R10, (DI)
	ADDQ   $8, SI
	ADDQ   $8, DI
	SUBQ   $8, DX
	CMPQ   DX, $8
	JAE    chead8

chead4:
	TESTQ  $4, DX
	JZ     chead2
	MOVL   (SI), R10
	CRC32L R10, AX
	MOVL   R10, (DI)
	ADDQ   $4, SI
	ADDQ   $4, DI

chead2:
	TESTQ  $2, DX
	JZ     chead1
	MOVW   (SI), R10
	CRC32W R10, AX
	MOVW   R10, (DI)
	ADDQ   $2, SI
	ADDQ   $2, DI

chead1:
	TESTQ  $1, DX
	JZ     cblocks
	MOVB   (SI), R10
	CRC32B R10, AX
	MOVB   R10, (DI)
	INCQ   SI
	INCQ   DI

cblocks:
	TESTQ CX, CX
	JZ    cshort
	LEAQ      ·crc32cFoldK(SB), R8
	VMOVD     AX, X4
	VMOVDQU64 (SI), Z0
	VMOVDQU64 Z0, (DI)
	VPXORQ    Z4, Z0, Z0
	CMPQ      CX, $256
	JB        cone
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVDQU64 Z1, 64(DI)
	VMOVDQU64 Z2, 128(DI)
	VMOVDQU64 Z3, 192(DI)
	ADDQ      $256, SI
	ADDQ      $256, DI
	SUBQ      $256, CX
	CMPQ      CX, $256
	JB        cfour

	VBROADCASTI32X4 (R8), Z5

cloop4:
	VMOVDQU64 (SI), Z10
	VMOVDQU64 64(SI), Z11
	VMOVDQU64 128(SI), Z12
	VMOVDQU64 192(SI), Z13
	VMOVDQU64 Z10, (DI)
	VMOVDQU64 Z11, 64(DI)
	VMOVDQU64 Z12, 128(DI)
	VMOVDQU64 Z13, 192(DI)
	fold64(Z5, Z0, Z10, Z6)
	fold64(Z5, Z1, Z11, Z7)
	fold64(Z5, Z2, Z12, Z8)
	fold64(Z5, Z3, Z13, Z9)
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $256, CX
	CMPQ CX, $256
	JAE  cloop4

cfour:
	// As at four.
	VBROADCASTI32X4 16(R8), Z5
	fold64(Z5, Z0, Z2, Z6)
	fold64(Z5, Z1, Z3, Z7)
	VBROADCASTI32X4 32(R8), Z5
	fold64(Z5, Z0, Z1, Z6)
	TESTQ           CX, CX
	JZ              clanes

cloop1:
	VMOVDQU64 (SI), Z10
	VMOVDQU64 Z10, (DI)
	fold64(Z5, Z0, Z10, Z6)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $64, CX
	JNZ  cloop1
	JMP  clanes

cone:
	ADDQ            $64, SI
	ADDQ            $64, DI
	SUBQ            $64, CX
	JZ              clanes
	VBROADCASTI32X4 32(R8), Z5
	JMP             cloop1

clanes:
	reduce

cshort:
	MOVL AX, ret+56(FP)
	RET

// func crc32cWords(c uint32, w0, w1 uint64) uint32
TEXT ·crc32cWords(SB), NOSPLIT, $0-28
	MOVL   c+0(FP), AX
	MOVQ   w0+8(FP), BX
	MOVQ   w1+16(FP), CX
	CRC32Q BX, AX
	CRC32Q CX, AX
	MOVL   AX, ret+24(FP)
	RET

// func crc32cWords20(c uint32, w0, w1 uint64, w2 uint32) uint32
TEXT ·crc32cWords20(SB), NOSPLIT, $0-36
	MOVL   c+0(FP), AX
	MOVQ   w0+8(FP), BX
	MOVQ   w1+16(FP), CX
	MOVL   w2+24(FP), DX
	CRC32Q BX, AX
	CRC32Q CX, AX
	CRC32L DX, AX
	MOVL   AX, ret+32(FP)
	RET
