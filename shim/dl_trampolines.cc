// dlsym and dlvsym of libtrainscope.so: ask trainscope_dl_decide (dl_interception.cc), then return its answer, or
// jump to the real function with the caller's arguments and return address untouched.
//
// Why assembly: glibc resolves RTLD_NEXT (and RTLD_DEFAULT's scope) from dlsym's return address. A C wrapper that
// called the real dlsym would make every RTLD_NEXT look-up relative to this library, and a second preloaded library
// that wraps open() with dlsym(RTLD_NEXT, "open") would find its own open and recurse. A tail jump keeps the
// caller's return address, and only assembly guarantees one at every optimisation level.
#if defined(__x86_64__)
__asm__(R"(
        .macro TS_DL_TRAMPOLINE name, real, has_version
        .text
        .globl  \name
        .type   \name, @function
        .p2align 4
\name:
        .cfi_startproc
        endbr64
        pushq   %rdi
        .cfi_adjust_cfa_offset 8
        pushq   %rsi
        .cfi_adjust_cfa_offset 8
        pushq   %rdx
        .cfi_adjust_cfa_offset 8
        subq    $16, %rsp
        .cfi_adjust_cfa_offset 16
        .if \has_version == 0
        xorl    %edx, %edx
        .endif
        movq    %rsp, %rcx
        call    trainscope_dl_decide
        testl   %eax, %eax
        jnz     1f
        .cfi_remember_state
        addq    $16, %rsp
        .cfi_adjust_cfa_offset -16
        popq    %rdx
        .cfi_adjust_cfa_offset -8
        popq    %rsi
        .cfi_adjust_cfa_offset -8
        popq    %rdi
        .cfi_adjust_cfa_offset -8
        jmp     *\real(%rip)
1:
        .cfi_restore_state
        movq    (%rsp), %rax
        addq    $40, %rsp
        .cfi_adjust_cfa_offset -40
        ret
        .cfi_endproc
        .size   \name, .-\name
        .endm

        TS_DL_TRAMPOLINE dlsym, trainscope_real_dlsym, 0
        TS_DL_TRAMPOLINE dlvsym, trainscope_real_dlvsym, 1
        .purgem TS_DL_TRAMPOLINE
)");
#elif defined(__aarch64__)
__asm__(R"(
        .macro TS_DL_TRAMPOLINE name, real, has_version
        .text
        .globl  \name
        .type   \name, %function
        .p2align 4
\name:
        .cfi_startproc
        hint    34
        stp     x29, x30, [sp, #-48]!
        .cfi_def_cfa_offset 48
        .cfi_offset 29, -48
        .cfi_offset 30, -40
        mov     x29, sp
        stp     x0, x1, [sp, #16]
        str     x2, [sp, #32]
        .if \has_version == 0
        mov     x2, xzr
        .endif
        add     x3, sp, #40
        bl      trainscope_dl_decide
        cbnz    w0, 1f
        .cfi_remember_state
        ldp     x0, x1, [sp, #16]
        ldr     x2, [sp, #32]
        ldp     x29, x30, [sp], #48
        .cfi_restore 29
        .cfi_restore 30
        .cfi_def_cfa_offset 0
        adrp    x16, \real
        ldr     x16, [x16, :lo12:\real]
        br      x16
1:
        .cfi_restore_state
        ldr     x0, [sp, #40]
        ldp     x29, x30, [sp], #48
        .cfi_restore 29
        .cfi_restore 30
        .cfi_def_cfa_offset 0
        ret
        .cfi_endproc
        .size   \name, .-\name
        .endm

        TS_DL_TRAMPOLINE dlsym, trainscope_real_dlsym, 0
        TS_DL_TRAMPOLINE dlvsym, trainscope_real_dlvsym, 1
        .purgem TS_DL_TRAMPOLINE
)");
#else
#error "dl_trampolines.cc: dlsym/dlvsym trampolines exist for x86_64 and aarch64 only"
#endif
