/*
 * test_megatron_mem.c - Megatron's theoretical memory report (lib/memcalc):
 * worked examples (outputs of Megatron's own code,
 * megatron/training/theoretical_memory_usage.py), hand-counted parameters of
 * tiny dense and MoE models, the printed
 * lines, and --moe-layer-freq parsing. tests/prog/report_memory.sh checks
 * the program against Megatron's code on 81 configurations.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/size.h"
#include "memcalc/megatron_mem.h"
#include "memcalc/memcalc_command.h"
#include "model/gpt_config.h"
#include "test.h"

#define CHECK_NEAR(x, want, tol)                                                                      \
	do {                                                                                          \
		double t_x = (x), t_w = (want);                                                       \
		if (!(fabs(t_x - t_w) <= (tol))) {                                                    \
			printf("#   %s:%d: %s == %.6f, expected %.6f\n", __FILE__, __LINE__, #x, t_x, t_w); \
			t_checks_failed++;                                                            \
		}                                                                                     \
	} while (0)

/* example 1: L=24 h=1024 a=16 f=4096 V=50304 tied LayerNorm s=1024 b=4 t=p=1 d=8 */
static struct mm_config gpt_350m(void)
{
	return (struct mm_config){ .L = 24, .h = 1024, .a = 16, .k = 64, .g = 16, .f = 4096, .V = 50304,
				   .add_bias_linear = true, .world = 8, .t = 1, .p = 1, .d = 8, .ep = 1, .etp = 1,
				   .s = 1024, .b = 4, .nmb = 1 };
}

static void test_example_plain(void)
{
	struct mm_config c = gpt_350m();
	struct mm_report r;
	CHECK_INT(megatron_mem_compute(&c, &r), 0);
	CHECK_NEAR(r.total / 1e9, 0.35, 0.005);
	CHECK_NEAR(r.block / 1e9, 0.30, 0.005);
	CHECK_NEAR(r.embedding / 1e9, 0.05, 0.005);
	CHECK_NEAR(r.shard / 1e9, 0.3536, 0.00005);
	CHECK_NEAR(r.per_layer_MB, 136.0, 0.05);
	CHECK(!r.sp_path);
	CHECK_NEAR(r.weight_MB, 6069.97, 0.005);
	CHECK_NEAR(r.activation_MB, 3852.48, 0.005);
	CHECK_NEAR(r.total_MB, 9922.46, 0.005);
}

static void test_example_distopt(void)
{
	struct mm_config c = gpt_350m();
	c.dist_opt = true;
	struct mm_report r;
	CHECK_INT(megatron_mem_compute(&c, &r), 0);
	CHECK_NEAR(r.bytes_per_param, 7.5, 0);
	CHECK_NEAR(r.weight_MB, 2529.16, 0.005);
	CHECK_NEAR(r.total_MB, 6381.64, 0.005);
}

/* example 3: Llama-2-7B shape, TP2 PP2 DP2, SP + selective, distributed optimizer, 8 micro-batches */
static void test_example_llama_sp(void)
{
	struct mm_config c = { .L = 32, .h = 4096, .a = 32, .k = 128, .g = 32, .f = 11008, .V = 32000,
			       .swiglu = true, .rmsnorm = true, .untied = true, .world = 8, .t = 2, .p = 2, .d = 2,
			       .ep = 1, .etp = 2, .sp = true, .selective = true, .dist_opt = true, .s = 4096, .b = 1,
			       .nmb = 8 };
	struct mm_report r;
	CHECK_INT(megatron_mem_compute(&c, &r), 0);
	CHECK_NEAR(r.total / 1e9, 6.74, 0.005);
	CHECK_NEAR(r.shard / 1e9, 1.6847, 0.00005);
	CHECK_NEAR(r.other_shards / 1e9, 1.6191, 0.00005);
	CHECK(r.sp_path);
	CHECK_NEAR(r.per_layer_MB, 230.0, 0.05);
	CHECK_INT(r.in_flight, 2);
	CHECK_NEAR(r.weight_MB, 19279.52, 0.005);
	CHECK_NEAR(r.activation_MB, 7376.03, 0.005);
	CHECK_NEAR(r.total_MB, 26655.55, 0.005);
	/* fewer micro-batches than stages: activations scale by nmb / p */
	c.nmb = 1;
	struct mm_report r1;
	CHECK_INT(megatron_mem_compute(&c, &r1), 0);
	CHECK_INT(r1.in_flight, 1);
	CHECK_NEAR(r1.activation_bytes, r.activation_bytes / 2, 1e-3);
	/* interleaving: penalty 1 + (p-1)/(p v) = 1.25 with v = 2, ceil(2.5) = 3 in flight */
	c.nmb = 8;
	c.vpp = 2;
	CHECK_INT(megatron_mem_compute(&c, &r1), 0);
	CHECK_NEAR(r1.penalty, 1.25, 0);
	CHECK_INT(r1.in_flight, 3);
	CHECK_NEAR(r1.activation_bytes, r.activation_bytes * 1.25, 1e-3);
}

/* example 4: Llama-3-8B shape, GQA */
static void test_example_llama3(void)
{
	struct mm_config c = { .L = 32, .h = 4096, .a = 32, .k = 128, .g = 8, .group_query_attention = true,
			       .f = 14336, .V = 128256, .swiglu = true, .rmsnorm = true, .untied = true, .world = 1,
			       .t = 1, .p = 1, .d = 1, .ep = 1, .etp = 1, .s = 8192, .b = 1, .nmb = 1 };
	struct mm_report r;
	CHECK_INT(megatron_mem_compute(&c, &r), 0);
	CHECK_NEAR(r.total / 1e9, 8.03, 0.005);
	CHECK_NEAR(r.block / 1e9, 6.98, 0.005);
	CHECK_NEAR(r.embedding / 1e9, 1.05, 0.005);
	/* without --group-query-attention, num_query_groups is ignored (Megatron sets it to the heads) */
	c.group_query_attention = false;
	struct mm_report r2;
	CHECK_INT(megatron_mem_compute(&c, &r2), 0);
	CHECK_NEAR(r2.block - r.block, 32.0 * 2 * 4096 * 128 * (32 - 8), 0);
}

/* by hand: L=2 h=8 a=2 f=16 V=32 tied LayerNorm, s=4 b=1, one rank */
static void test_tiny_dense(void)
{
	struct mm_config c = { .L = 2, .h = 8, .a = 2, .k = 4, .g = 2, .f = 16, .V = 32, .add_bias_linear = true,
			       .world = 1, .t = 1, .p = 1, .d = 1, .ep = 1, .etp = 1, .s = 4, .b = 1, .nmb = 1 };
	struct mm_report r;
	CHECK_INT(megatron_mem_compute(&c, &r), 0);
	/* layer: attention 4h^2 = 256, MLP 2hf = 256, two LayerNorms 4h = 32; final norm 2h = 16 */
	CHECK_NEAR(r.block, 2 * 544 + 16, 0);
	CHECK_NEAR(r.embedding, 256, 0);
	CHECK_NEAR(r.total, 1360, 0);
	CHECK_NEAR(r.shard, 1360, 0);
	CHECK_NEAR(r.weight_bytes, 1360 * 18, 0);
	/* per layer s·b·h·34 = 1088, x2; embedding 32 + 32; logits + norm 2·(128 + 32); x1.05 */
	CHECK_NEAR(r.activation_bytes, 2560 * 1.05, 1e-9);
}

/* by hand: the same with SwiGLU, RMSNorm, untied, 4 experts top-2 on layer 0 only, EP 2 of 4 ranks */
static void test_tiny_moe(void)
{
	unsigned char pattern[2];
	CHECK_INT(gpt_moe_pattern("2", 2, pattern), 0);
	CHECK(pattern[0] == 1 && pattern[1] == 0);
	struct mm_config c = { .L = 2, .h = 8, .a = 2, .k = 4, .g = 2, .f = 16, .V = 32, .swiglu = true,
			       .rmsnorm = true, .untied = true, .num_experts = 4, .topk = 2, .moe_ffn = 16,
			       .moe_pattern = pattern, .world = 4, .t = 1, .p = 1, .d = 4, .ep = 2, .etp = 1,
			       .dist_opt = true, .s = 4, .b = 1, .nmb = 1 };
	struct mm_report r;
	CHECK_INT(megatron_mem_compute(&c, &r), 0);
	/* dense 256 + 384 + 16 = 656; MoE 256 + experts 1536 + 16 + router 32 = 1840 (active 1072) */
	CHECK_NEAR(r.block, 656 + 1840 + 8, 0);
	CHECK_NEAR(r.block_active, 656 + 1072 + 8, 0);
	CHECK_NEAR(r.total, 2504 + 512, 0);
	CHECK_NEAR(r.p_tp, 896 + 256 + 256, 0); /* TP-sharded + embedding + untied output layer (p = 1) */
	CHECK_NEAR(r.p_rep, 72, 0);
	CHECK_NEAR(r.p_exp, 768, 0);
	CHECK_NEAR(r.bytes_per_param, 9, 0);        /* 6 + 12/4 */
	CHECK_NEAR(r.bytes_per_expert_param, 12, 0); /* 6 + 12/2: expert DP = 4 / (1 x 2 x 1) */
	CHECK_NEAR(r.weight_bytes, 1480 * 9 + 768 * 12, 0);
	/* an MTP layer follows the last pattern entry (dense here) and counts whole in the active total */
	c.mtp = 1;
	CHECK_INT(megatron_mem_compute(&c, &r), 0);
	CHECK_NEAR(r.mtp_block, 656, 0);
	CHECK_NEAR(r.total_active, 1736 + 656 + 512, 0);
}

static void test_printed_lines(void)
{
	struct mm_config c = gpt_350m();
	struct mm_report r;
	CHECK_INT(megatron_mem_compute(&c, &r), 0);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	megatron_mem_print(&c, &r, f);
	fclose(f);
	CHECK_STR(buf, "Number of parameters in transformer block in billions:  0.30\n"
		       "Number of active parameters in transformer block in billions:  0.30\n"
		       "Number of parameters in embedding layers in billions: 0.05\n"
		       "Total number of parameters in billions: 0.35\n"
		       "Total number of active parameters in billions: 0.35\n"
		       "Number of parameters in most loaded shard in billions: 0.3536\n"
		       "compute_activation_memory_without_sp\n"
		       "Activation memory footprint per transformer layer (precise, without SP): 136.0 MB\n"
		       "Theoretical memory footprints: weight and optimizer=6069.97 MB, activation=3852.48 MB, "
		       "total=9922.46 MB\n\n");
	free(buf);
}

static void test_moe_layer_freq(void)
{
	unsigned char p[4];
	CHECK_INT(gpt_moe_pattern("1", 4, p), 0);
	CHECK(p[0] && p[1] && p[2] && p[3]);
	CHECK_INT(gpt_moe_pattern("[0, 1,1 ,0]", 4, p), 0);
	CHECK(!p[0] && p[1] && p[2] && !p[3]);
	CHECK_INT(gpt_moe_pattern("3", 4, p), 0);
	CHECK(p[0] && !p[1] && !p[2] && p[3]);
	CHECK_INT(gpt_moe_pattern("[0,1,1]", 4, p), -1);   /* too short */
	CHECK_INT(gpt_moe_pattern("[0,1,1,1,1]", 4, p), -1); /* too long */
	CHECK_INT(gpt_moe_pattern("[0,2,1,1]", 4, p), -1);
	CHECK_INT(gpt_moe_pattern("0", 4, p), -1);
	CHECK_INT(gpt_moe_pattern("x", 4, p), -1);
	CHECK_INT(gpt_moe_pattern("[1,1,1,1]x", 4, p), -1);
}

/* The pattern of `spec` for L layers as a string of 0/1, or the error
 * message (which must name the flag) with rc -1. */
static int pattern_of(const char *spec, int L, char *out, size_t n)
{
	unsigned char p[64];
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	int rc = gpt_moe_pattern(spec, L, p);
	char *msg = test_capture_end(&cap);
	if (rc == 0) {
		for (int i = 0; i < L && i + 1 < (int)n; i++)
			out[i] = (char)('0' + p[i]);
		out[L < (int)n ? L : (int)n - 1] = 0;
	} else {
		snprintf(out, n, "%s", msg);
		CHECK(strstr(msg, "--moe-layer-freq") != NULL);
	}
	free(msg);
	return rc;
}

/* Megatron's expressions (what Python's eval gives for them), and the
 * errors: the position of what is wrong */
static void test_moe_layer_freq_expr(void)
{
	static const struct { const char *spec; int L; const char *want; } good[] = {
		{ "([0]*3+[1]*5)", 8, "00011111" },         /* DeepSeek-V3's form */
		{ "[0]*1+[1]*3", 4, "0111" },
		{ "([1]*3+[0]*1)*2", 8, "11101110" },        /* Megatron's help example */
		{ "2*[1,0]", 4, "1010" },                    /* int times list */
		{ "[1]*(1+1)+[0]*2*1", 4, "1100" },          /* '*' before '+', left to right */
		{ "[0,1,]*2", 4, "0101" },                   /* a trailing comma */
		{ "[1*1,0+0,(1),0*5]", 4, "1010" },          /* entries are expressions */
		{ "((([1])))*4", 4, "1111" },
		{ "[1]*0+[0,1]", 2, "01" },
		{ "[00,1]", 2, "01" },                       /* Python reads 00 as 0 */
		{ "[]+[1,1,1]", 3, "111" },
		{ "(1+1)*[1]", 2, "11" },
		{ " ( [0] + [1] * 2 ) ", 3, "011" },         /* spaces (Megatron's check refuses them) */
	};
	char out[256];
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		int rc = pattern_of(good[i].spec, good[i].L, out, sizeof(out));
		CHECK_INT(rc, 0);
		if (rc == 0)
			CHECK_STR(out, good[i].want);
	}
	static const struct { const char *spec; int L; const char *msg; } bad[] = {
		{ "([0]*3+[1]*5", 8, "expected ')' at position 13" },
		{ "[0]*3+[1]*4", 8, "gives 7 entries; --num-layers is 8" },
		{ "[0]*3+1", 4, "a list plus an integer at position 6" },
		{ "1+[1]", 2, "a list plus an integer at position 2" },
		{ "[0]*[1]", 1, "a list times a list at position 4" },
		{ "[0]**2", 2, "'**'" },
		{ "[[1],[0]]", 2, "a list inside a list (entries are 0 or 1) at position 2" },
		{ "[1,2]", 2, "entry 1 is 2; entries are 0 or 1" },
		{ "[1]*2-[1]", 1, "unexpected text (only digits, ',', '[', ']', '(', ')', '+' and '*') at position 6" },
		{ "([1],[0])", 2, "a tuple" },
		{ "[1]*(2,)", 2, "a tuple" },
		{ "[1][0]", 1, "indexing" },
		{ "([1]*2)[0]", 2, "indexing" },
		{ "[01]", 1, "leading zero at position 2" },
		{ "[1,,0]", 2, "expected an integer, '[' or '(' at position 4" },
		{ "[1,0", 2, "expected ',' or ']' at position 5" },
		{ "[1]*", 1, "the text ends" },
		{ "2*([1]", 1, "expected ')' at position 7" },
		{ "[1]*99999999", 1, "an integer too large" },
		{ "[1]*9999*9999", 1, "longer than any model" },
		{ "[1,0]*x", 2, "at position 7" },
		{ "[1]*(2*0)+2", 2, "a list plus an integer" },
		{ "(2)*(3)+[1]", 7, "a list plus an integer" },
		{ "([2]*2)", 2, "entry 0 is 2" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = pattern_of(bad[i].spec, bad[i].L, out, sizeof(out));
		CHECK_INT(rc, -1);
		if (!strstr(out, bad[i].msg)) {
			fprintf(stderr, "  %s: wanted \"%s\" in: %s", bad[i].spec, bad[i].msg, out);
			CHECK(false);
		}
	}
	/* no '[': an integer, as Megatron's int(x) */
	CHECK_INT(pattern_of(" 2 ", 4, out, sizeof(out)), 0);
	CHECK_STR(out, "1010");
	CHECK_INT(pattern_of("(2)", 4, out, sizeof(out)), -1);
	CHECK_INT(pattern_of("1+1", 4, out, sizeof(out)), -1);
}

/* --gpu-memory sizes: decimal and binary units, any case, plain bytes */
static void test_advise_sizes(void)
{
	double b;
	CHECK_INT(size_parse("80GiB", "--gpu-memory", &b), 0);
	CHECK(b == 80.0 * 1024 * 1024 * 1024);
	CHECK_INT(size_parse("141GB", "--gpu-memory", &b), 0);
	CHECK(b == 141e9);
	CHECK_INT(size_parse("1.5 tib", "--gpu-memory", &b), 0);
	CHECK(b == 1.5 * 1024.0 * 1024 * 1024 * 1024);
	CHECK_INT(size_parse("512MiB", "--gpu-memory", &b), 0);
	CHECK(b == 512.0 * 1024 * 1024);
	CHECK_INT(size_parse("123456", "--gpu-memory", &b), 0);
	CHECK(b == 123456);
	CHECK_INT(size_parse("80XB", "--gpu-memory", &b), -1);
	CHECK_INT(size_parse("GiB", "--gpu-memory", &b), -1);
	CHECK_INT(size_parse("-3GiB", "--gpu-memory", &b), -1);
	CHECK_INT(size_parse("0", "--gpu-memory", &b), -1);
	CHECK_INT(size_parse("", "--gpu-memory", &b), -1);
}

int main(void)
{
	log_init("test_megatron_mem", 0, 1);
	RUN(test_example_plain);
	RUN(test_example_distopt);
	RUN(test_example_llama_sp);
	RUN(test_example_llama3);
	RUN(test_tiny_dense);
	RUN(test_tiny_moe);
	RUN(test_printed_lines);
	RUN(test_moe_layer_freq);
	RUN(test_moe_layer_freq_expr);
	RUN(test_advise_sizes);
	return test_summary();
}
