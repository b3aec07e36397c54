/*
 * emu.cc - the thread-block emulator of emu.h: CUDA threads as fibers on
 * one host thread, warp collectives computed from all lanes' operands with
 * the PTX ISA's definitions (shuffles, votes, mma.m16n8k16, ldmatrix.m8n8.x4,
 * wgmma without swizzle), barriers, cp.async groups.
 *
 * Fibers. On x86-64 a thread switch is a few instructions (emu_fiber_switch
 * below saves the callee-saved registers, the SSE and x87 control words and
 * the stack pointer): whole training runs launch millions of emulated
 * threads. Elsewhere, and under AddressSanitizer (which must see stack
 * switches through the ucontext calls it intercepts), ucontext does it.
 * Stacks come from one pool, mapped once and reused by every block, each
 * with a guard page below it.
 *
 * State of a thread (thr.state):
 *
 *     T_RUN --(collective)--> T_WARP --(all lanes of the mask there: computed)--> T_RUN
 *     T_RUN --(__syncthreads)--> T_BAR --(every thread of the block there)--> T_RUN
 *     T_RUN --(returns from the kernel)--> T_DONE
 *
 * Invariants:
 *   1. Exactly one fiber runs at a time; the scheduler (run_block) resumes a
 *      thread only in T_RUN, and a thread leaves T_RUN only by switching back
 *      to the scheduler.
 *   2. A collective is computed only when every lane its mask names waits on
 *      the same operation with the same argument; a lane of the mask in
 *      T_DONE is an error, one elsewhere (or at another collective) keeps it
 *      waiting. Each waiting lane's collective is tried, so disjoint masks
 *      of one warp complete independently.
 *   3. A barrier releases only when every thread of the block is at it.
 *   4. No progress in a whole sweep over the warps, with threads not done, is
 *      a deadlock, reported with where the threads are.
 */
#include "emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_NO_ASM_FIBERS 1
#endif
#endif
#ifndef EMU_NO_ASM_FIBERS
#define EMU_ASM_FIBERS 1
#endif
#endif

#ifdef EMU_ASM_FIBERS
/* void emu_fiber_switch(void **save_sp, void *to_sp): saves this context on
 * its stack and *save_sp, resumes the one saved at to_sp */
asm(".pushsection .text\n"
    ".globl emu_fiber_switch\n"
    ".hidden emu_fiber_switch\n"
    ".type emu_fiber_switch,@function\n"
    "emu_fiber_switch:\n"
    "\tpushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n"
    "\tsubq $8, %rsp\n\tstmxcsr (%rsp)\n\tfnstcw 4(%rsp)\n"
    "\tmovq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n"
    "\tldmxcsr (%rsp)\n\tfldcw 4(%rsp)\n\taddq $8, %rsp\n"
    "\tpopq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n"
    "\tret\n"
    ".size emu_fiber_switch,.-emu_fiber_switch\n"
    ".popsection\n");
extern "C" void emu_fiber_switch(void **save_sp, void *to_sp);
#endif

namespace {

enum { T_RUN, T_WARP, T_BAR, T_DONE };
enum {
	OP_SHFL = 1,
	OP_VOTE,
	OP_SYNCWARP,
	OP_LDSM,
	OP_MMA,
	OP_WG_FIRST, /* warpgroup collectives from here on */
	OP_WG_MMA = OP_WG_FIRST,
	OP_WG_FENCE,
	OP_WG_COMMIT,
	OP_WG_WAIT
};

struct lane_op {
	int op, arg;
	unsigned mask;               /* the lanes that take part (warp collectives) */
	int mode, width;             /* shuffles: emu_shfl_mode and the segment width; votes: the mode */
	uint64_t v;                  /* shuffles: this lane's bits, then the result; votes: the predicate */
	const void *p;               /* ldmatrix: this lane's row address */
	const uint32_t *a, *b;       /* mma operands */
	float *d;                    /* mma accumulators, in and out */
	uint32_t *r;                 /* ldmatrix result registers */
	/* wgmma: descriptors, N, half kind (0 bf16, 1 fp16), A in registers (a) or
	 * shared memory (da), scale-d */
	uint64_t da, db;
	int n, kind, a_regs, scale_d;
};

/* one issued wgmma of a warpgroup: every lane's accumulators and A registers
 * (read when it executes: a lane that rewrites them before the wait fails) */
struct wg_op {
	float *d[128];
	const uint32_t *a[128];
	uint64_t da, db;
	int n, kind, a_regs, scale_d, group;
};

/* a queued cp.async: group is the thread's commit count when it was issued */
struct async_copy {
	unsigned char *dst;
	const unsigned char *src;
	int bytes, src_bytes;
	int group;
};
const int MAX_ASYNC = 64;

struct thr {
#ifdef EMU_ASM_FIBERS
	void *sp;
#else
	ucontext_t ctx;
#endif
	dim3 tid;
	int state;
	lane_op op;
	char *stack;
	async_copy pending[MAX_ASYNC];
	int npending, groups;
};

/* The one emulated block (one host thread runs everything). */
struct emu_state {
	thr *th;
	int n;
	dim3 bid, bdim, gdim;
	unsigned char *smem;
	size_t smem_bytes;
#ifdef EMU_ASM_FIBERS
	void *sched_sp;
#else
	ucontext_t sched;
#endif
	int cur;
	const std::function<void()> *body;
	const char *name;
	int failed;
	int cp_eager; /* cp.async and wgmma land when issued (order bit 1 clear) or at their wait (set) */
	std::vector<wg_op> wg_pending[8]; /* per warpgroup of the block: issued, not yet retired */
	int wg_groups[8];                 /* per warpgroup: commit count */
	int wg_fenced[8];                 /* per warpgroup: wgmma.fence since the last wait */
	/* per 16 bytes of shared memory: 1 + the thread whose cp.async wrote it
	 * and has not run fence.proxy.async since (wgmma may not read it), or 0 */
	std::vector<int> unfenced;
};
emu_state E;

const size_t STACK = 256 * 1024, GUARD = 4096;
const int MAX_THREADS = 1024;

/* the stack pool: MAX_THREADS stacks, mapped on first use (pages are
 * touched only as deep as the kernels go) */
char *stack_pool;

char *stack_of(int i)
{
	if (!stack_pool) {
		const size_t each = STACK + GUARD, total = each * MAX_THREADS;
		void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			       -1, 0);
		if (m == MAP_FAILED) {
			fprintf(stderr, "emu: cannot map %zu bytes of thread stacks\n", total);
			exit(1);
		}
		for (int t = 0; t < MAX_THREADS; t++)
			mprotect((char *)m + (size_t)t * each, GUARD, PROT_NONE);
		stack_pool = (char *)m;
	}
	return stack_pool + (size_t)i * (STACK + GUARD) + GUARD;
}

void fail(const char *what)
{
	if (!E.failed)
		fprintf(stderr, "emu: %s%s%sblock (%u,%u,%u): %s\n", E.name ? "kernel " : "", E.name ? E.name : "",
			E.name ? ", " : "", E.bid.x, E.bid.y, E.bid.z, what);
	E.failed = 1;
}

void to_scheduler(thr *t)
{
#ifdef EMU_ASM_FIBERS
	emu_fiber_switch(&t->sp, E.sched_sp);
#else
	swapcontext(&t->ctx, &E.sched);
#endif
}

void to_thread(thr *t)
{
#ifdef EMU_ASM_FIBERS
	emu_fiber_switch(&E.sched_sp, t->sp);
#else
	swapcontext(&E.sched, &t->ctx);
#endif
}

void entry(void)
{
	(*E.body)();
	thr *t = &E.th[E.cur];
	t->state = T_DONE;
#ifdef EMU_ASM_FIBERS
	to_scheduler(t); /* never resumed */
	abort();
#endif
	/* ucontext: returning resumes uc_link, the scheduler */
}

#ifdef EMU_ASM_FIBERS
[[noreturn]] void fiber_main(void)
{
	entry();
	abort();
}

/* a fresh stack whose first switch "returns" into fiber_main, aligned as a call */
void fiber_init(thr *t)
{
	uintptr_t top = ((uintptr_t)t->stack + STACK) & ~(uintptr_t)15;
	uint64_t *sp = (uint64_t *)(top - 8);
	*--sp = (uint64_t)(uintptr_t)&fiber_main;
	for (int i = 0; i < 6; i++)
		*--sp = 0; /* rbp rbx r12 r13 r14 r15 */
	uint32_t mxcsr;
	uint16_t fpucw;
	asm volatile("stmxcsr %0" : "=m"(mxcsr));
	asm volatile("fnstcw %0" : "=m"(fpucw));
	*--sp = (uint64_t)mxcsr | (uint64_t)fpucw << 32;
	t->sp = sp;
}
#else
void fiber_init(thr *t)
{
	getcontext(&t->ctx);
	t->ctx.uc_stack.ss_sp = t->stack;
	t->ctx.uc_stack.ss_size = STACK;
	t->ctx.uc_link = &E.sched;
	makecontext(&t->ctx, entry, 0);
}
#endif

void wait_collective(int state)
{
	thr *t = &E.th[E.cur];
	t->state = state;
	to_scheduler(t);
}

float half_to_f32(uint16_t h, int kind)
{
	return kind == 0 ? emu_bf16_to_f32(h) : emu_f16_to_f32(h);
}

/* ldmatrix .x4: lanes 8j..8j+7 address the 8 rows of matrix j */
void do_ldsm(thr *w)
{
	const uint16_t *row[32];
	for (int l = 0; l < 32; l++) {
		const unsigned char *p = (const unsigned char *)w[l].op.p;
		if (p < E.smem || p + 16 > E.smem + E.smem_bytes || ((uintptr_t)p & 15)) {
			char msg[160];
			snprintf(msg, sizeof msg,
				 "ldmatrix: lane %d's row address is %s (offset %td of %zu bytes of shared memory)", l,
				 ((uintptr_t)p & 15) ? "not 16-byte aligned" : "outside shared memory",
				 p - E.smem, E.smem_bytes);
			fail(msg);
			return;
		}
		row[l] = (const uint16_t *)p;
	}
	const int trans = w[0].op.arg;
	for (int l = 0; l < 32; l++) {
		for (int j = 0; j < 4; j++) {
			uint16_t lo, hi;
			if (!trans) { /* lane l: row l/4, columns 2(l%4), 2(l%4)+1 */
				lo = row[8 * j + l / 4][2 * (l % 4)];
				hi = row[8 * j + l / 4][2 * (l % 4) + 1];
			} else { /* transposed: rows 2(l%4), 2(l%4)+1 of column l/4 */
				lo = row[8 * j + 2 * (l % 4)][l / 4];
				hi = row[8 * j + 2 * (l % 4) + 1][l / 4];
			}
			w[l].op.r[j] = (uint32_t)lo | (uint32_t)hi << 16;
		}
	}
}

/* mma.m16n8k16 .row.col: lane l = 4 gid + tig holds
 *   A (16x16): a0 {A[gid][2tig], A[gid][2tig+1]}, a1 the same at row gid+8,
 *              a2 at columns 2tig+8, 2tig+9 of row gid, a3 of row gid+8;
 *   B (16x8):  b0 {B[2tig][gid], B[2tig+1][gid]}, b1 rows 2tig+8, 2tig+9;
 *   C, D (16x8, fp32): c0 C[gid][2tig], c1 C[gid][2tig+1], c2 c3 row gid+8. */
void do_mma(thr *w)
{
	const int kind = w[0].op.arg;
	float A[16][16], Bm[16][8], C[16][8];
	for (int l = 0; l < 32; l++) {
		const int g = l / 4, t = l % 4;
		const uint32_t *a = w[l].op.a, *b = w[l].op.b;
		const float *d = w[l].op.d;
		for (int h = 0; h < 2; h++) {
			A[g][2 * t + h] = half_to_f32((uint16_t)(a[0] >> 16 * h), kind);
			A[g + 8][2 * t + h] = half_to_f32((uint16_t)(a[1] >> 16 * h), kind);
			A[g][2 * t + 8 + h] = half_to_f32((uint16_t)(a[2] >> 16 * h), kind);
			A[g + 8][2 * t + 8 + h] = half_to_f32((uint16_t)(a[3] >> 16 * h), kind);
			Bm[2 * t + h][g] = half_to_f32((uint16_t)(b[0] >> 16 * h), kind);
			Bm[2 * t + 8 + h][g] = half_to_f32((uint16_t)(b[1] >> 16 * h), kind);
		}
		C[g][2 * t] = d[0];
		C[g][2 * t + 1] = d[1];
		C[g + 8][2 * t] = d[2];
		C[g + 8][2 * t + 1] = d[3];
	}
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 8; j++) {
			float s = C[i][j];
			for (int k = 0; k < 16; k++)
				s += A[i][k] * Bm[k][j]; /* products of halves are exact in fp32 */
			C[i][j] = s;
		}
	for (int l = 0; l < 32; l++) {
		const int g = l / 4, t = l % 4;
		float *d = w[l].op.d;
		d[0] = C[g][2 * t];
		d[1] = C[g][2 * t + 1];
		d[2] = C[g + 8][2 * t];
		d[3] = C[g + 8][2 * t + 1];
	}
}

/* the shuffles of the PTX ISA (shfl.sync) within segments of width lanes:
 * the source lane, or -1 where the lane keeps its own value (CUDA's
 * __shfl_*_sync: idx wraps within the segment; up and down stay in it;
 * xor may reach an earlier segment but not a later one) */
int shfl_src(int l, int mode, int arg, int width)
{
	const int base = l & ~(width - 1), pos = l - base;
	switch (mode) {
	case EMU_SHFL_IDX:
		return base + (arg & (width - 1));
	case EMU_SHFL_UP:
		return pos >= arg ? l - arg : -1;
	case EMU_SHFL_DOWN:
		return pos + arg < width ? l + arg : -1;
	default: { /* xor: a lane may read an earlier segment, not a later one */
		const int s = l ^ arg;
		return s < base + width ? s : -1;
	}
	}
}

void do_shfl(thr *w, unsigned mask)
{
	const int mode = w[0].op.mode, width = w[0].op.width;
	uint64_t v[32];
	for (int l = 0; l < 32; l++) {
		if (!(mask >> l & 1))
			continue;
		const int s = shfl_src(l, mode, w[l].op.arg, width);
		if (s >= 0 && !(mask >> s & 1)) {
			char msg[160];
			snprintf(msg, sizeof msg, "a shuffle of lane %d reads lane %d, which is not in its mask 0x%08x", l,
				 s, mask);
			fail(msg);
			return;
		}
		v[l] = s >= 0 ? w[s].op.v : w[l].op.v;
	}
	for (int l = 0; l < 32; l++)
		if (mask >> l & 1)
			w[l].op.v = v[l];
}

void do_vote(thr *w, unsigned mask)
{
	unsigned ballot = 0;
	for (int l = 0; l < 32; l++)
		if ((mask >> l & 1) && w[l].op.v)
			ballot |= 1u << l;
	const int mode = w[0].op.mode;
	const unsigned r = mode == EMU_VOTE_BALLOT ? ballot : mode == EMU_VOTE_ANY ? ballot != 0 : ballot == mask;
	for (int l = 0; l < 32; l++)
		if (mask >> l & 1)
			w[l].op.v = r;
}

/* an element of a shared-memory matrix through a descriptor without swizzle
 * (wg.cuh's layouts): (mn, k) K-major, or (k, n) MN-major */
float desc_elem(uint64_t desc, int mn, int k, int mn_major, int kind)
{
	const size_t start = (size_t)(desc & 0x3fff) << 4, lbo = (size_t)(desc >> 16 & 0x3fff) << 4,
		     sbo = (size_t)(desc >> 32 & 0x3fff) << 4;
	if (desc >> 62) {
		fail("wgmma: a swizzled descriptor (the emulator knows the canonical layouts without swizzle)");
		return 0;
	}
	const size_t off = start + (size_t)(mn / 8) * sbo + (size_t)(k / 8) * lbo +
			   (mn_major ? (size_t)(k % 8) * 16 + (size_t)(mn % 8) * 2 : (size_t)(mn % 8) * 16 + (size_t)(k % 8) * 2);
	if (off + 2 > E.smem_bytes) {
		char msg[160];
		snprintf(msg, sizeof msg, "wgmma: an operand element at shared offset %zu is past the %zu bytes", off,
			 E.smem_bytes);
		fail(msg);
		return 0;
	}
	if (E.unfenced[off / 16]) {
		char msg[200];
		snprintf(msg, sizeof msg,
			 "wgmma reads shared offset %zu, which thread %d wrote by cp.async without fence.proxy.async "
			 "since",
			 off, E.unfenced[off / 16] - 1);
		fail(msg);
		return 0;
	}
	uint16_t h;
	memcpy(&h, E.smem + off, 2);
	return half_to_f32(h, kind);
}

/* d = A B (+ d): A 64 x 16 from shared memory (K-major) or the lanes'
 * registers (mma's A fragment per warp), B 16 x N from shared memory,
 * K-major or, transposed, MN-major (wg.cuh) */
void wg_exec(const wg_op *o)
{
	const int N = o->n;
	float A[64][16], Bm[16][256];
	for (int m = 0; m < 64; m++)
		for (int k = 0; k < 16; k++)
			A[m][k] = o->a_regs ? 0.0f : desc_elem(o->da, m, k, 0, o->kind);
	if (o->a_regs)
		for (int t = 0; t < 128; t++) {
			const int w = t / 32, g = t % 32 / 4, q = t % 4, r = 16 * w + g;
			for (int h = 0; h < 2; h++) {
				A[r][2 * q + h] = half_to_f32((uint16_t)(o->a[t][0] >> 16 * h), o->kind);
				A[r + 8][2 * q + h] = half_to_f32((uint16_t)(o->a[t][1] >> 16 * h), o->kind);
				A[r][2 * q + 8 + h] = half_to_f32((uint16_t)(o->a[t][2] >> 16 * h), o->kind);
				A[r + 8][2 * q + 8 + h] = half_to_f32((uint16_t)(o->a[t][3] >> 16 * h), o->kind);
			}
		}
	for (int k = 0; k < 16; k++)
		for (int n = 0; n < N; n++)
			Bm[k][n] = desc_elem(o->db, n, k, o->a_regs /* the transposed-B form */, o->kind);
	if (E.failed)
		return;
	for (int t = 0; t < 128; t++) {
		const int w = t / 32, g = t % 32 / 4, q = t % 4;
		for (int j = 0; j < N / 8; j++)
			for (int e = 0; e < 4; e++) {
				const int r = 16 * w + g + 8 * (e / 2), c = 8 * j + 2 * q + e % 2;
				float acc = o->scale_d ? o->d[t][4 * j + e] : 0.0f;
				for (int k = 0; k < 16; k++)
					acc += A[r][k] * Bm[k][c];
				o->d[t][4 * j + e] = acc;
			}
	}
}

/* a warpgroup collective, all 128 lanes waiting on it (g: the group's first thread) */
void do_warpgroup(thr *g, int wgi)
{
	const int op = g[0].op.op;
	for (int l = 1; l < 128; l++)
		if (g[l].op.op != op || g[l].op.arg != g[0].op.arg) {
			fail("divergent warpgroup collective (the four warps of a warpgroup at different wgmma operations)");
			return;
		}
	switch (op) {
	case OP_WG_FENCE:
		E.wg_fenced[wgi] = 1;
		break;
	case OP_WG_COMMIT:
		E.wg_groups[wgi]++;
		break;
	case OP_WG_MMA: {
		if (!E.wg_fenced[wgi]) { /* the kernels fence before every batch of products */
			fail("wgmma without wgmma.fence since the warpgroup's last wait");
			return;
		}
		wg_op o;
		o.da = g[0].op.da;
		o.db = g[0].op.db;
		o.n = g[0].op.n;
		o.kind = g[0].op.kind;
		o.a_regs = g[0].op.a_regs;
		o.scale_d = g[0].op.scale_d;
		o.group = E.wg_groups[wgi];
		for (int l = 0; l < 128; l++) {
			if (g[l].op.da != o.da || g[l].op.db != o.db || g[l].op.n != o.n || g[l].op.scale_d != o.scale_d) {
				fail("wgmma: the lanes of a warpgroup gave different descriptors or shapes");
				return;
			}
			o.d[l] = g[l].op.d;
			o.a[l] = g[l].op.a;
		}
		if (E.cp_eager)
			wg_exec(&o);
		else
			E.wg_pending[wgi].push_back(o);
		break;
	}
	case OP_WG_WAIT: {
		E.wg_fenced[wgi] = 0;
		std::vector<wg_op> &pend = E.wg_pending[wgi];
		std::vector<wg_op> keep;
		for (const wg_op &o : pend) {
			if (o.group < E.wg_groups[wgi] - g[0].op.arg)
				wg_exec(&o);
			else
				keep.push_back(o);
		}
		pend.swap(keep);
		break;
	}
	default:
		fail("unknown warpgroup collective");
	}
}

/* what a deadlock report says about lanes at different collectives */
char divergence[240];

/*
 * The collective that lane l0 of warp w (its first thread) waits at, if
 * every lane it names is there too. 1: done (the lanes run again), 0: not
 * yet, -1: an error (reported).
 */
int try_lane(thr *w, int nlanes, int l0)
{
	const lane_op &o0 = w[l0].op;
	if (o0.op >= OP_WG_FIRST) { /* a warpgroup collective: all four warps */
		const int wi = (int)((w - E.th) / 32), gi = wi / 4;
		thr *g = &E.th[128 * gi];
		if (128 * gi + 128 > E.n) {
			fail("a warpgroup collective in a block that is not whole warpgroups");
			return -1;
		}
		for (int l = 0; l < 128; l++) {
			if (g[l].state == T_DONE) {
				fail("a warpgroup collective after a thread of the warpgroup has exited");
				return -1;
			}
			if (g[l].state != T_WARP || g[l].op.op < OP_WG_FIRST)
				return 0; /* the other warps of the group come later */
		}
		do_warpgroup(g, gi);
		if (E.failed)
			return -1;
		for (int l = 0; l < 128; l++)
			g[l].state = T_RUN;
		return 1;
	}
	const unsigned mask = o0.mask;
	if (!(mask >> l0 & 1)) {
		char msg[160];
		snprintf(msg, sizeof msg, "lane %d is at a warp collective whose mask 0x%08x does not name it", l0, mask);
		fail(msg);
		return -1;
	}
	for (int l = 0; l < 32; l++) {
		if (!(mask >> l & 1))
			continue;
		if (l >= nlanes || w[l].state == T_DONE) {
			char msg[200];
			snprintf(msg, sizeof msg,
				 "a warp collective (op %d) with mask 0x%08x names lane %d, which %s", o0.op, mask, l,
				 l >= nlanes ? "is past the block's threads" : "has exited");
			fail(msg);
			return -1;
		}
		if (w[l].state != T_WARP)
			return 0;
		const lane_op &o = w[l].op;
		if (o.op != o0.op || o.mask != mask || (o.op != OP_SHFL && o.arg != o0.arg) ||
		    o.mode != o0.mode || o.width != o0.width) {
			/* maybe lane l's own group completes first; if nothing can,
			 * the deadlock report says this */
			snprintf(divergence, sizeof divergence,
				 "; divergent warp collective: lane %d waits at op %d (%d, mask 0x%08x), lane %d at op "
				 "%d (%d, mask 0x%08x)",
				 l0, o0.op, o0.arg, mask, l, o.op, o.arg, o.mask);
			return 0;
		}
	}
	switch (o0.op) {
	case OP_SHFL:
		do_shfl(w, mask);
		break;
	case OP_VOTE:
		do_vote(w, mask);
		break;
	case OP_SYNCWARP:
		break;
	case OP_LDSM:
	case OP_MMA:
		if (mask != 0xffffffffu || nlanes < 32) {
			fail("ldmatrix and mma.sync take the whole warp");
			return -1;
		}
		if (o0.op == OP_LDSM)
			do_ldsm(w);
		else
			do_mma(w);
		break;
	default:
		fail("unknown warp collective");
	}
	if (E.failed)
		return -1;
	for (int l = 0; l < 32; l++)
		if (mask >> l & 1)
			w[l].state = T_RUN;
	return 1;
}

/* Any collective of warp w whose lanes are all there (each waiting lane's,
 * in lane order): 1 when one was computed, 0 when none can be yet, -1 on
 * an error. */
int try_warp(thr *w, int nlanes)
{
	for (int l0 = 0; l0 < nlanes; l0++) {
		if (w[l0].state != T_WARP)
			continue;
		const int r = try_lane(w, nlanes, l0);
		if (r)
			return r;
	}
	return 0;
}

int run_block(int order)
{
	const int n = E.n;
	for (int i = 0; i < n; i++) {
		thr *t = &E.th[i];
		t->tid.x = (unsigned)(i % E.bdim.x);
		t->tid.y = (unsigned)(i / E.bdim.x % E.bdim.y);
		t->tid.z = (unsigned)(i / (E.bdim.x * E.bdim.y));
		t->state = T_RUN;
		t->npending = 0;
		t->groups = 0;
		fiber_init(t);
	}
	/* Warp at a time: a warp runs, its collectives computed as soon as all
	 * their lanes wait, until it reaches __syncthreads or its end; then the
	 * next warp. Warps drift as far apart as the barriers allow, in one
	 * direction (order bit 0 clear: warp 0 first) or the other, so a shared-memory
	 * read that lacks a barrier sees the writer's data in one order and not
	 * in the other. */
	const int nw = (n + 31) / 32;
	for (;;) {
		int progressed = 0;
		for (int x = 0; x < nw; x++) {
			const int wi = order & 1 ? nw - 1 - x : x;
			thr *w = &E.th[32 * wi];
			const int nlanes = n - 32 * wi < 32 ? n - 32 * wi : 32;
			for (;;) {
				for (int y = 0; y < nlanes; y++) {
					const int l = order & 1 ? nlanes - 1 - y : y;
					if (w[l].state != T_RUN)
						continue;
					E.cur = (int)(w + l - E.th);
					to_thread(&w[l]);
					if (E.failed)
						return -1;
					progressed = 1;
				}
				const int r = try_warp(w, nlanes);
				if (r < 0)
					return -1;
				if (r == 0)
					break;
				progressed = 1;
			}
		}
		int done = 0, bar = 0;
		for (int i = 0; i < n; i++) {
			done += E.th[i].state == T_DONE;
			bar += E.th[i].state == T_BAR;
		}
		if (done == n)
			return 0;
		if (bar == n) {
			for (int i = 0; i < n; i++)
				E.th[i].state = T_RUN;
			continue;
		}
		if (!progressed) {
			char msg[240];
			int first_bar = -1, first_warp = -1;
			for (int i = 0; i < n; i++) {
				if (E.th[i].state == T_BAR && first_bar < 0)
					first_bar = i;
				if (E.th[i].state == T_WARP && first_warp < 0)
					first_warp = i;
			}
			snprintf(msg, sizeof msg,
				 "deadlock: %d of %d threads done, %d at __syncthreads (first %d), first waiting on a "
				 "warp collective %d (a barrier not reached by every thread, or a collective whose "
				 "lanes are elsewhere)%s",
				 done, n, bar, first_bar, first_warp, divergence);
			fail(msg);
			return -1;
		}
	}
}

/* a collective's operands, and this lane's arrival at it (back when it is done) */
lane_op op_of(int op, int arg, unsigned mask)
{
	lane_op o{};
	o.op = op;
	o.arg = arg;
	o.mask = mask;
	return o;
}

void post(const lane_op &o)
{
	E.th[E.cur].op = o;
	wait_collective(T_WARP);
}

} // namespace

int emu_sm = 90;

const dim3 &emu_thread_idx(void) { return E.th[E.cur].tid; }
const dim3 &emu_block_idx(void) { return E.bid; }
const dim3 &emu_block_dim(void) { return E.bdim; }
const dim3 &emu_grid_dim(void) { return E.gdim; }
void *emu_smem(void) { return E.smem; }

void emu_trap(void)
{
	char msg[120];
	const dim3 t = E.th[E.cur].tid;
	snprintf(msg, sizeof msg, "thread (%u,%u,%u) trapped (__trap: a kernel's own check failed)", t.x, t.y, t.z);
	fail(msg);
	E.th[E.cur].state = T_DONE;
	to_scheduler(&E.th[E.cur]); /* never resumed: the launch has failed */
	abort();
}

void emu_cp_async(void *smem, const void *gmem, int bytes, int src_bytes)
{
	thr *t = &E.th[E.cur];
	unsigned char *d = (unsigned char *)smem;
	const uintptr_t al = (uintptr_t)bytes - 1;
	if ((bytes != 4 && bytes != 8 && bytes != 16) || d < E.smem || d + bytes > E.smem + E.smem_bytes ||
	    ((uintptr_t)d & al) || ((uintptr_t)gmem & al) || (src_bytes != 0 && src_bytes != bytes)) {
		/* the source must be aligned even when nothing is read */
		fail("cp.async: the shared address is outside shared memory or either address is not aligned to "
		     "the copy's size, or a size other than 4, 8, 16, or a source size other than 0 or the size");
		return;
	}
	if (E.cp_eager) { /* the earliest the hardware may land it */
		if (src_bytes)
			memcpy(d, gmem, (size_t)bytes);
		else
			memset(d, 0, (size_t)bytes);
		E.unfenced[(size_t)(d - E.smem) / 16] = E.cur + 1;
		return;
	}
	if (t->npending == MAX_ASYNC) {
		fail("cp.async: more copies in flight in one thread than the emulator holds");
		return;
	}
	t->pending[t->npending++] = async_copy{ d, (const unsigned char *)gmem, bytes, src_bytes, t->groups };
}

void emu_cp_async_commit(void)
{
	E.th[E.cur].groups++;
}

void emu_cp_async_wait(int n)
{
	thr *t = &E.th[E.cur];
	int kept = 0;
	for (int i = 0; i < t->npending; i++) {
		async_copy *c = &t->pending[i];
		if (c->group < t->groups - n) { /* a committed group older than the n newest */
			if (c->src_bytes)
				memcpy(c->dst, c->src, (size_t)c->bytes);
			else
				memset(c->dst, 0, (size_t)c->bytes);
			E.unfenced[(size_t)(c->dst - E.smem) / 16] = E.cur + 1;
		} else {
			t->pending[kept++] = *c;
		}
	}
	t->npending = kept;
}

uint32_t emu_smem_addr(const void *p)
{
	const unsigned char *c = (const unsigned char *)p;
	if (c < E.smem || c > E.smem + E.smem_bytes)
		fail("a shared-memory address of a pointer outside the block's shared memory");
	return (uint32_t)(c - E.smem);
}

void emu_fence_proxy(void)
{
	const int me = E.cur + 1;
	for (int &o : E.unfenced)
		if (o == me)
			o = 0;
}

void emu_wgmma_fence(void)
{
	if (emu_sm < 90) {
		char msg[120];
		snprintf(msg, sizeof msg, "wgmma on an sm_%d device (Hopper's sm_90a only)", emu_sm);
		fail(msg);
		return;
	}
	post(op_of(OP_WG_FENCE, 0, 0xffffffffu));
}

void emu_wgmma_commit(void)
{
	post(op_of(OP_WG_COMMIT, 0, 0xffffffffu));
}

void emu_wgmma_wait(int n)
{
	post(op_of(OP_WG_WAIT, n, 0xffffffffu));
}

void emu_wgmma(float *d, int n, uint64_t da, const uint32_t *a, uint64_t db, int kind, int trans_b, int scale_d)
{
	lane_op o = op_of(OP_WG_MMA, n, 0xffffffffu);
	o.d = d;
	o.da = da;
	o.db = db;
	o.n = n;
	o.kind = kind;
	o.a_regs = a != NULL;
	o.a = a;
	o.scale_d = scale_d;
	if ((a != NULL) != (trans_b != 0))
		fail("emu_wgmma: the emulator has A in shared memory with B K-major, or A in registers with B transposed");
	post(o);
}

void emu_syncthreads(void)
{
	wait_collective(T_BAR);
}

void emu_syncwarp(unsigned mask)
{
	post(op_of(OP_SYNCWARP, 0, mask));
}

uint64_t emu_shfl(unsigned mask, uint64_t bits, enum emu_shfl_mode mode, int arg, int width)
{
	if (width < 1 || width > 32 || (width & (width - 1))) {
		fail("a shuffle's width is not a power of two up to 32");
		return bits;
	}
	lane_op o = op_of(OP_SHFL, arg, mask);
	o.mode = mode;
	o.width = width;
	o.v = bits;
	post(o);
	return E.th[E.cur].op.v;
}

unsigned emu_vote(unsigned mask, int pred, enum emu_vote_mode mode)
{
	lane_op o = op_of(OP_VOTE, 0, mask);
	o.mode = mode;
	o.v = pred != 0;
	post(o);
	return (unsigned)E.th[E.cur].op.v;
}

void emu_ldmatrix_x4(uint32_t r[4], const void *row, int trans)
{
	lane_op o = op_of(OP_LDSM, trans, 0xffffffffu);
	o.p = row;
	o.r = r;
	post(o);
}

void emu_mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], int half_kind)
{
	lane_op o = op_of(OP_MMA, half_kind, 0xffffffffu);
	o.a = a;
	o.b = b;
	o.d = d;
	post(o);
}

int emu_launch_named(const char *name, dim3 grid, dim3 block, size_t smem_bytes, int order,
		     const std::function<void()> &body)
{
	const long n = (long)block.x * block.y * block.z;
	if (n <= 0 || n > MAX_THREADS) {
		fprintf(stderr, "emu: %s%sa block of %ld threads (1 to %d)\n", name ? name : "", name ? ": " : "", n,
			MAX_THREADS);
		return -1;
	}
	if (grid.x == 0 || grid.y == 0 || grid.z == 0)
		return 0;
	static std::vector<thr> threads; /* reused: thr holds no resources but the pool's stacks */
	if (threads.size() < (size_t)MAX_THREADS)
		threads.resize(MAX_THREADS);
	static std::vector<unsigned char> smem;
	if (smem.size() < smem_bytes + 16)
		smem.resize(smem_bytes + 16);
	E = emu_state{};
	E.n = (int)n;
	E.bdim = block;
	E.gdim = grid;
	E.body = &body;
	E.name = name;
	E.cp_eager = !(order & 2);
	E.unfenced.assign(smem_bytes / 16 + 1, 0);
	E.smem_bytes = smem_bytes;
	E.smem = (unsigned char *)(((uintptr_t)smem.data() + 15) & ~(uintptr_t)15);
	E.th = threads.data();
	for (int i = 0; i < E.n; i++)
		E.th[i].stack = stack_of(i);
	int rc = 0;
	for (unsigned z = 0; z < grid.z && !rc; z++)
		for (unsigned y = 0; y < grid.y && !rc; y++)
			for (unsigned x = 0; x < grid.x && !rc; x++) {
				E.bid = dim3{ x, y, z };
				for (int i = 0; i < 8; i++) {
					E.wg_pending[i].clear();
					E.wg_groups[i] = 0;
					E.wg_fenced[i] = 0;
				}
				std::fill(E.unfenced.begin(), E.unfenced.end(), 0);
				memset(E.smem, 0xff, smem_bytes); /* NaN in every float format */
				divergence[0] = 0;
				rc = run_block(order);
			}
	E = emu_state{};
	return rc;
}

int emu_launch(dim3 grid, dim3 block, size_t smem_bytes, int order, const std::function<void()> &body)
{
	return emu_launch_named(NULL, grid, block, smem_bytes, order, body);
}
