/*
 * test_layout.c - lib/dist/layout: Megatron's rank generator, the parallel
 * layout checks, embedding ranks and the layer split.
 *
 * Three worked examples, whose groups were listed by running Megatron's own
 * RankGenerator (megatron/core/parallel_state.py), are checked group by group.
 * Then, for a few hundred random layouts (world up to 64, the two order
 * strings Megatron's training passes and random permutations of the axes,
 * every subset of the five axes as the group token), rank_gen_groups is
 * compared with a Python transcription of Megatron's
 * generate_masked_orthogonal_rank_groups run by
 * /usr/bin/python3, and rank_gen_group_of with rank_gen_groups. The groups
 * this test writes (c_groups.txt beside cases.txt in its scratch directory)
 * were also compared once with Megatron's real RankGenerator.
 */
#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "dist/layout.h"
#include "model/gpt_config.h"
#include "test.h"

#define TP DIST_BIT(DIST_TP)
#define CP DIST_BIT(DIST_CP)
#define EP DIST_BIT(DIST_EP)
#define DP DIST_BIT(DIST_DP)
#define PP DIST_BIT(DIST_PP)

/* ---------------------------------------------------------------- helpers */

/* "[0,1] [2,3]": ng groups of gs ranks, as the worked examples list them. */
static void add_groups(struct sbuf *sb, const int *r, int gs, int ng)
{
	for (int g = 0; g < ng; g++) {
		sbuf_addstr(sb, g ? " [" : "[");
		for (int j = 0; j < gs; j++)
			sbuf_addf(sb, j ? ",%d" : "%d", r[g * gs + j]);
		sbuf_addch(sb, ']');
	}
}

/* Check that the groups spanning `axes` read `expect`. */
#define CHECK_GROUPS(g, axes, expect)                                         \
	do {                                                                  \
		int *t_r, t_gs, t_ng;                                         \
		struct sbuf t_sb = SBUF_INIT;                                 \
		CHECK_INT(rank_gen_groups((g), (axes), &t_r, &t_gs, &t_ng), 0); \
		add_groups(&t_sb, t_r, t_gs, t_ng);                           \
		CHECK_STR(t_sb.buf, (expect));                                \
		sbuf_release(&t_sb);                                          \
		free(t_r);                                                    \
	} while (0)

/* The embedding (or, with pos, position-embedding) group of every pp group. */
static char *embedding_groups(const struct rank_gen *g, bool tied, bool pos)
{
	int *r, gs, ng;
	struct sbuf sb = SBUF_INIT;
	rank_gen_groups(g, PP, &r, &gs, &ng);
	for (int i = 0; i < ng; i++) {
		int e[2];
		int n = pos ? dist_position_embedding_ranks(r + i * gs, gs, e)
			    : dist_embedding_ranks(r + i * gs, gs, tied, e);
		if (i)
			sbuf_addch(&sb, ' ');
		add_groups(&sb, e, n, 1);
	}
	free(r);
	return sbuf_detach(&sb, NULL);
}

/* A struct args with what dist_layout_from_args reads: a small valid GPT. */
static struct args make_args(int tp, int pp, int cp)
{
	struct args a;
	memset(&a, 0, sizeof(a));
	a.tensor_model_parallel_size = tp;
	a.pipeline_model_parallel_size = pp;
	a.context_parallel_size = cp;
	a.expert_model_parallel_size = 1;
	a.expert_tensor_parallel_size = -1; /* the flag table's "not given": the TP size */
	a.num_layers = 8;
	a.num_attention_heads = 8;
	a.num_query_groups = 1;
	a.seq_length = 64;
	a.micro_batch_size = 1;
	a.global_batch_size = -1;
	a.num_layers_per_virtual_pipeline_stage = -1; /* the flag table's "not given" */
	a.num_virtual_stages_per_pipeline_rank = -1;
	return a;
}

/* dist_layout_from_args with stderr captured into *msg (caller frees). */
static int layout_capture(struct dist_layout *l, const struct args *a, int world, char **msg)
{
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	int r = dist_layout_from_args(l, a, world);
	*msg = test_capture_end(&cap);
	return r;
}

/* Expect a refusal whose message contains each of the NULL-terminated needles. */
static void expect_refusal(const struct args *a, int world, const char *const *needles)
{
	struct dist_layout l;
	char *msg;
	CHECK_INT(layout_capture(&l, a, world, &msg), -1);
	for (; *needles; needles++) {
		if (!msg || !strstr(msg, *needles)) {
			printf("#   message \"%s\" lacks \"%s\"\n", msg ? msg : "(null)", *needles);
			CHECK(0);
		}
	}
	free(msg);
}

/* rank_gen_init with stderr captured; returns its result, *msg the output. */
static int init_capture(struct rank_gen *g, int tp, int ep, int dp, int pp, int cp, const char *order,
			char **msg)
{
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	int r = rank_gen_init(g, tp, ep, dp, pp, cp, order);
	*msg = test_capture_end(&cap);
	return r;
}

/* ---------------------------------------------------------------- worked examples */

/* world = 8, tp = 2, pp = 2 (dp = 2): the rank table and every group. */
static void test_example_8(void)
{
	struct args a = make_args(2, 2, 1);
	struct dist_layout l;
	CHECK_INT(dist_layout_from_args(&l, &a, 8), 0);
	CHECK_INT(l.world, 8);
	CHECK_INT(l.tp, 2);
	CHECK_INT(l.pp, 2);
	CHECK_INT(l.cp, 1);
	CHECK_INT(l.dp, 2);
	CHECK_INT(l.ep, 1);
	CHECK_INT(l.etp, 2);
	CHECK_INT(l.edp, 2);
	CHECK_INT(l.vpp, 1);

	struct rank_gen g;
	CHECK_INT(dist_dense_gen(&g, &l, NULL), 0);
	CHECK_INT(g.world, 8);
	/* the rank table: rank = tp_r + 2·dp_r + 4·pp_r */
	static const int table[8][3] = { { 0, 0, 0 }, { 1, 0, 0 }, { 0, 1, 0 }, { 1, 1, 0 },
					 { 0, 0, 1 }, { 1, 0, 1 }, { 0, 1, 1 }, { 1, 1, 1 } };
	for (int r = 0; r < 8; r++) {
		int c[DIST_NAXES];
		CHECK_INT(rank_gen_coords(&g, r, c), 0);
		CHECK_INT(c[DIST_TP], table[r][0]);
		CHECK_INT(c[DIST_DP], table[r][1]);
		CHECK_INT(c[DIST_PP], table[r][2]);
		CHECK_INT(c[DIST_CP], 0);
		CHECK_INT(c[DIST_EP], 0);
		CHECK_INT(rank_gen_rank(&g, c), r);
		/* pipeline stage 0 = ranks 0-3, stage 1 = ranks 4-7 */
		CHECK_INT(c[DIST_PP], r / 4);
	}

	CHECK_GROUPS(&g, TP, "[0,1] [2,3] [4,5] [6,7]");
	CHECK_GROUPS(&g, PP, "[0,4] [1,5] [2,6] [3,7]");
	CHECK_GROUPS(&g, DP, "[0,2] [1,3] [4,6] [5,7]");
	CHECK_GROUPS(&g, DP | CP, "[0,2] [1,3] [4,6] [5,7]");
	CHECK_GROUPS(&g, CP, "[0] [1] [2] [3] [4] [5] [6] [7]");
	CHECK_GROUPS(&g, TP | PP, "[0,1,4,5] [2,3,6,7]");
	CHECK_GROUPS(&g, TP | DP, "[0,1,2,3] [4,5,6,7]");
	CHECK_GROUPS(&g, TP | DP | CP, "[0,1,2,3] [4,5,6,7]");
	CHECK_GROUPS(&g, TP | CP, "[0,1] [2,3] [4,5] [6,7]");

	char *s = embedding_groups(&g, true, false);
	CHECK_STR(s, "[0,4] [1,5] [2,6] [3,7]");
	free(s);
	s = embedding_groups(&g, false, false);
	CHECK_STR(s, "[0] [1] [2] [3]");
	free(s);
	s = embedding_groups(&g, true, true);
	CHECK_STR(s, "[0] [1] [2] [3]");
	free(s);

	/* the expert generator: etp = 2, ep = 1, edp = 2 */
	struct rank_gen e;
	CHECK_INT(dist_expert_gen(&e, &l, NULL), 0);
	CHECK_GROUPS(&e, EP, "[0] [1] [2] [3] [4] [5] [6] [7]");
	CHECK_GROUPS(&e, TP, "[0,1] [2,3] [4,5] [6,7]");
	CHECK_GROUPS(&e, TP | EP, "[0,1] [2,3] [4,5] [6,7]");
	CHECK_GROUPS(&e, TP | EP | PP, "[0,1,4,5] [2,3,6,7]");
	CHECK_GROUPS(&e, DP, "[0,2] [1,3] [4,6] [5,7]");

	/* The intra distributed-optimizer instance: Megatron concatenates
	 * edp / instances (here 2 / 1) consecutive tp-ep-pp groups. */
	int *r, gs, ng;
	CHECK_INT(rank_gen_groups(&e, TP | EP | PP, &r, &gs, &ng), 0);
	CHECK_INT(gs * ng, 8);
	CHECK_INT(ng, l.edp);
	struct sbuf sb = SBUF_INIT;
	add_groups(&sb, r, gs * ng, 1);
	CHECK_STR(sb.buf, "[0,1,4,5,2,3,6,7]"); /* as a set: [0…7] */
	sbuf_release(&sb);
	free(r);
}

/* world = 8, tp = 2, pp = 1, ep = 2 (etp = 2). */
static void test_example_expert(void)
{
	struct rank_gen d, e;
	CHECK_INT(rank_gen_init(&d, 2, 1, 4, 1, 1, DIST_ORDER_DEFAULT), 0);
	CHECK_GROUPS(&d, TP, "[0,1] [2,3] [4,5] [6,7]");
	CHECK_GROUPS(&d, DP, "[0,2,4,6] [1,3,5,7]");

	/* edp = world / (etp·ep·pp) = 2; sizes in order tp cp ep dp pp */
	CHECK_INT(rank_gen_init(&e, 2, 2, 2, 1, 1, DIST_ORDER_DEFAULT), 0);
	static const enum dist_axis order[] = { DIST_TP, DIST_CP, DIST_EP, DIST_DP, DIST_PP };
	static const int sizes[] = { 2, 1, 2, 2, 1 };
	for (int i = 0; i < DIST_NAXES; i++) {
		CHECK_INT(e.order[i], order[i]);
		CHECK_INT(e.size[e.order[i]], sizes[i]);
	}
	CHECK_INT(e.norder_given, 5);
	CHECK_GROUPS(&e, EP, "[0,2] [1,3] [4,6] [5,7]");
	CHECK_GROUPS(&e, TP | EP, "[0,1,2,3] [4,5,6,7]");
	CHECK_GROUPS(&e, DP, "[0,4] [1,5] [2,6] [3,7]");
	/* both generators give the same pipeline groups (initialize_model_parallel checks it) */
	CHECK_GROUPS(&d, PP, "[0] [1] [2] [3] [4] [5] [6] [7]");
	CHECK_GROUPS(&e, PP, "[0] [1] [2] [3] [4] [5] [6] [7]");
}

/* world = 8, tp = 2, ep = 2 with --expert-tensor-parallel-size 1: each
 * expert whole, the EP groups inside the dense TP groups, edp = 4. */
static void test_example_etp(void)
{
	struct args a = make_args(2, 1, 1);
	a.expert_model_parallel_size = 2;
	a.expert_tensor_parallel_size = 1;
	struct dist_layout l;
	CHECK_INT(dist_layout_from_args(&l, &a, 8), 0);
	CHECK_INT(l.tp, 2);
	CHECK_INT(l.dp, 4);
	CHECK_INT(l.etp, 1);
	CHECK_INT(l.ep, 2);
	CHECK_INT(l.edp, 4);
	CHECK(dist_experts_apart(&l));
	struct rank_gen e;
	CHECK_INT(dist_expert_gen(&e, &l, NULL), 0);
	CHECK_GROUPS(&e, TP, "[0] [1] [2] [3] [4] [5] [6] [7]");
	CHECK_GROUPS(&e, EP, "[0,1] [2,3] [4,5] [6,7]");
	CHECK_GROUPS(&e, TP | EP, "[0,1] [2,3] [4,5] [6,7]");
	CHECK_GROUPS(&e, DP, "[0,2,4,6] [1,3,5,7]");
	CHECK_INT(dist_check_order(&l, NULL), 0);
	/* expert TP larger than TP: tp 1, etp 2 on 4 ranks (edp 2) */
	a = make_args(1, 1, 1);
	a.expert_tensor_parallel_size = 2;
	CHECK_INT(dist_layout_from_args(&l, &a, 4), 0);
	CHECK_INT(l.etp, 2);
	CHECK_INT(l.edp, 2);
	CHECK(dist_experts_apart(&l));
	CHECK_INT(dist_expert_gen(&e, &l, NULL), 0);
	CHECK_GROUPS(&e, TP, "[0,1] [2,3]");
	CHECK_GROUPS(&e, DP, "[0,2] [1,3]");
	/* the default: expert TP = TP, nothing apart without EP */
	a = make_args(2, 1, 1);
	CHECK_INT(dist_layout_from_args(&l, &a, 4), 0);
	CHECK_INT(l.etp, 2);
	CHECK(!dist_experts_apart(&l));
	a.expert_tensor_parallel_size = 3;
	expect_refusal(&a, 8, (const char *const[]){ "not divisible by --expert-tensor-parallel-size 3", NULL });
	a.expert_tensor_parallel_size = 0;
	expect_refusal(&a, 8, (const char *const[]){ "--expert-tensor-parallel-size 0", "between 1", NULL });
}

/* the docstring example of initialize_model_parallel: world = 16, tp = 2, pp = 4. */
static void test_example_16(void)
{
	struct args a = make_args(2, 4, 1);
	struct dist_layout l;
	CHECK_INT(dist_layout_from_args(&l, &a, 16), 0);
	CHECK_INT(l.dp, 2);
	struct rank_gen g;
	CHECK_INT(dist_dense_gen(&g, &l, NULL), 0);
	CHECK_GROUPS(&g, DP, "[0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]");
	CHECK_GROUPS(&g, TP, "[0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]");
	CHECK_GROUPS(&g, PP, "[0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]");
	char *s = embedding_groups(&g, true, false);
	CHECK_STR(s, "[0,12] [1,13] [2,14] [3,15]");
	free(s);
	s = embedding_groups(&g, false, false);
	CHECK_STR(s, "[0] [1] [2] [3]");
	free(s);

	/* the pp-before-dp order puts data-parallel replicas farthest apart */
	struct rank_gen m;
	CHECK_INT(dist_dense_gen(&m, &l, DIST_ORDER_TP_PP_DP), 0);
	CHECK_GROUPS(&m, PP, "[0,2,4,6] [1,3,5,7] [8,10,12,14] [9,11,13,15]");
	CHECK_GROUPS(&m, DP, "[0,8] [1,9] [2,10] [3,11] [4,12] [5,13] [6,14] [7,15]");
}

/* dp-cp groups: cp varies fastest inside a group (a consequence of the order string). */
static void test_dp_cp_order(void)
{
	/* world 16 = tp 2 · cp 2 · dp 2 · pp 2: rank = tp + 2cp + 4dp + 8pp */
	struct args a = make_args(2, 2, 2);
	struct dist_layout l;
	CHECK_INT(dist_layout_from_args(&l, &a, 16), 0);
	CHECK_INT(l.dp, 2);
	CHECK_INT(l.edp, 4); /* expert data parallelism spans cp too */
	struct rank_gen g;
	CHECK_INT(dist_dense_gen(&g, &l, NULL), 0);
	CHECK_GROUPS(&g, DP | CP, "[0,2,4,6] [1,3,5,7] [8,10,12,14] [9,11,13,15]");
	CHECK_GROUPS(&g, CP, "[0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]");
	int m[4], idx;
	CHECK_INT(rank_gen_group_of(&g, DP | CP, 13, m, &idx), 3);
	CHECK_INT(idx, 2); /* cp 0, dp 1 → 0 + 2·1 */
	CHECK_INT(m[0], 9);
	CHECK_INT(m[3], 15);
}

/* ---------------------------------------------------------------- layers per stage */

static void test_stage_layers(void)
{
	int first, count;
	/* L = 8, pp = 2, vpp = 2: stage 0 → [0,1] and [4,5]; stage 1 → [2,3] and [6,7] */
	static const int expect[2][2] = { { 0, 4 }, { 2, 6 } };
	for (int s = 0; s < 2; s++)
		for (int v = 0; v < 2; v++) {
			dist_stage_layers(&(struct dist_split){ .L = 8, .pp = 2, .vpp = 2 }, s, v, &first, &count);
			CHECK_INT(first, expect[s][v]);
			CHECK_INT(count, 2);
		}
	/* without interleaving: [r·L/pp, (r+1)·L/pp) */
	dist_stage_layers(&(struct dist_split){ .L = 8, .pp = 2, .vpp = 1 }, 0, 0, &first, &count);
	CHECK_INT(first, 0);
	CHECK_INT(count, 4);
	dist_stage_layers(&(struct dist_split){ .L = 8, .pp = 2, .vpp = 1 }, 1, 0, &first, &count);
	CHECK_INT(first, 4);
	CHECK_INT(count, 4);
	dist_stage_layers(&(struct dist_split){ .L = 12, .pp = 1, .vpp = 1 }, 0, 0, &first, &count);
	CHECK_INT(first, 0);
	CHECK_INT(count, 12);
	/* Megatron's docstring, 16 layers, pp 4, vpp 2 (1-based there):
	 * GPU 0: [1,2] [9,10]  GPU 1: [3,4] [11,12]  ...  GPU 3: [7,8] [15,16] */
	for (int s = 0; s < 4; s++)
		for (int v = 0; v < 2; v++) {
			dist_stage_layers(&(struct dist_split){ .L = 16, .pp = 4, .vpp = 2 }, s, v, &first, &count);
			CHECK_INT(first + 1, 1 + 2 * s + 8 * v);
			CHECK_INT(count, 2);
		}
	/* every layer on exactly one (stage, virtual stage) */
	int seen[24] = { 0 };
	for (int s = 0; s < 3; s++)
		for (int v = 0; v < 4; v++) {
			dist_stage_layers(&(struct dist_split){ .L = 24, .pp = 3, .vpp = 4 }, s, v, &first, &count);
			for (int k = 0; k < count; k++)
				seen[first + k]++;
		}
	for (int k = 0; k < 24; k++)
		CHECK_INT(seen[k], 1);
}

/* Megatron's uneven pipeline (num_layers_in_first/last_pipeline_stage), as
 * its get_transformer_layer_offset computes each chunk's first layer: a
 * transcription of that function, fed every valid split of small models. */
static const char *py_uneven =
	"def offset(L, pp, vpp, F, La, r, v):\n"
	"    mid = pp - (F is not None) - (La is not None)\n"
	"    f = F or 0; la = La or 0\n"
	"    midL = L - f - la\n"
	"    mr = r if F is None else r - 1\n"
	"    if vpp > 1:\n"
	"        cf = f // vpp; cl = la // vpp; cm = midL // vpp\n"
	"        tot = cf + cm + cl\n"
	"        # (Megatron divides by mid here even when it is 0, with pp 2 and both\n"
	"        # counts given: the last stage's offset is then v * tot + cf)\n"
	"        return v * tot if r == 0 else v * tot + cf + mr * (cm // mid if mid else 0)\n"
	"    per = midL // mid if mid > 0 else 0\n"
	"    return 0 if r == 0 else mr * per + f\n"
	"bad = n = 0\n"
	"for line in open(os.path.join(sys.argv[1], 'uneven.txt')):\n"
	"    L, pp, vpp, F, La, r, v, first = map(int, line.split())\n"
	"    n += 1\n"
	"    want = offset(L, pp, vpp, F or None, La or None, r, v)\n"
	"    if want != first:\n"
	"        bad += 1\n"
	"        print('mismatch', L, pp, vpp, F, La, r, v, first, want)\n"
	"print('bad', bad, 'of', n > 100)\n";

static void test_stage_layers_uneven(void)
{
	int first, count;
	/* DeepSeek-V3's 61 layers on 16 stages, 3 on the first, 4 on each other
	 * (61 = 3 + 14·4 + 2 with 2 on the last) */
	struct dist_split ds = { .L = 61, .pp = 16, .vpp = 1, .first = 3, .last = 2 };
	CHECK(dist_split_check(&ds) == NULL);
	dist_stage_layers(&ds, 0, 0, &first, &count);
	CHECK_INT(first, 0);
	CHECK_INT(count, 3);
	dist_stage_layers(&ds, 5, 0, &first, &count);
	CHECK_INT(first, 3 + 4 * 4);
	CHECK_INT(count, 4);
	dist_stage_layers(&ds, 15, 0, &first, &count);
	CHECK_INT(first, 59);
	CHECK_INT(count, 2);
	/* what does not split is said */
	CHECK(dist_split_check(&(struct dist_split){ .L = 61, .pp = 16, .vpp = 1, .first = 3 }) != NULL);
	CHECK(dist_split_check(&(struct dist_split){ .L = 8, .pp = 2, .vpp = 2, .first = 3 }) != NULL);
	CHECK(dist_split_check(&(struct dist_split){ .L = 8, .pp = 1, .vpp = 1, .first = 8 }) != NULL);
	CHECK(dist_split_check(&(struct dist_split){ .L = 4, .pp = 2, .vpp = 1, .first = 2, .last = 1 }) != NULL);
	CHECK(dist_split_check(&(struct dist_split){ .L = 4, .pp = 3, .vpp = 1, .first = 2, .last = 2 }) != NULL);
	/* every valid split of up to 24 layers on up to 5 stages of up to 3
	 * chunks: each layer on one chunk exactly, and the offsets Megatron's */
	char *dir = test_tmpdir("uneven");
	char path[4200];
	snprintf(path, sizeof(path), "%s/uneven.txt", dir);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	for (int L = 1; L <= 24; L++)
		for (int pp = 2; pp <= 5; pp++)
			for (int vpp = 1; vpp <= 3; vpp++)
				for (int F = 0; F <= L; F++)
					for (int La = 0; La <= L - F; La++) {
						struct dist_split s = { .L = L, .pp = pp, .vpp = vpp, .first = F, .last = La };
						if ((!F && !La) || dist_split_check(&s))
							continue;
						int seen[24] = { 0 };
						for (int r = 0; r < pp; r++)
							for (int v = 0; v < vpp; v++) {
								dist_stage_layers(&s, r, v, &first, &count);
								for (int k = 0; k < count; k++)
									seen[first + k]++;
								fprintf(f, "%d %d %d %d %d %d %d %d\n", L, pp, vpp, F, La, r,
									v, first);
							}
						for (int k = 0; k < L; k++)
							CHECK_INT(seen[k], 1);
					}
	fclose(f);
	char *out = test_python(dir, "import sys, os\n", py_uneven);
	CHECK(out != NULL);
	if (out) {
		CHECK_STR(out, "bad 0 of True\n");
		free(out);
	}
	free(dir);
}

/* ---------------------------------------------------------------- layout checks */

static void test_constraints(void)
{
	struct args a;
	struct dist_layout l;
	char *msg;

	/* world divisibility */
	a = make_args(3, 1, 1);
	a.num_attention_heads = 6;
	a.num_layers = 6;
	expect_refusal(&a, 8, (const char *const[]){ "world size 8 is not divisible",
						     "--tensor-model-parallel-size 3",
						     "--pipeline-model-parallel-size 1",
						     "--context-parallel-size 1", "= 3", NULL });
	a = make_args(2, 2, 2);
	expect_refusal(&a, 12, (const char *const[]){ "world size 12", "--context-parallel-size 2", "= 8",
						      NULL });

	/* the model's shapes (heads, groups, layers, sequence) are not the
	 * layout's to check: test_model_fit */
	a = make_args(4, 2, 2);
	a.num_attention_heads = 6;
	a.num_layers = 5;
	a.seq_length = 6;
	CHECK_INT(layout_capture(&l, &a, 16, &msg), 0);
	CHECK_INT(l.cp, 2);
	CHECK_INT(l.dp, 1);
	free(msg);

	/* global batch % (mbs·dp) */
	a = make_args(1, 1, 1);
	a.micro_batch_size = 2;
	a.global_batch_size = 6;
	expect_refusal(&a, 2, (const char *const[]){ "--global-batch-size 6", "--micro-batch-size 2",
						     "data-parallel size 2", NULL });
	a.global_batch_size = 8;
	CHECK_INT(layout_capture(&l, &a, 2, &msg), 0);
	free(msg);
	a.global_batch_size = -1; /* not given: Megatron uses mbs·dp */
	CHECK_INT(layout_capture(&l, &a, 3, &msg), 0);
	free(msg);

	/* sizes */
	a = make_args(0, 1, 1);
	expect_refusal(&a, 2, (const char *const[]){ "--tensor-model-parallel-size 0", NULL });
	a = make_args(1, -2, 1);
	expect_refusal(&a, 2, (const char *const[]){ "--pipeline-model-parallel-size -2", NULL });
	a = make_args(1, 1, 1);
	expect_refusal(&a, 0, (const char *const[]){ "world size 0", NULL });

	/* tp == 1 turns sequence parallelism off, with Megatron's warning */
	a = make_args(1, 1, 1);
	a.sequence_parallel = true;
	CHECK_INT(layout_capture(&l, &a, 2, &msg), 0);
	CHECK(!l.sp);
	CHECK(msg && strstr(msg, "warning: Disabling sequence parallelism because tensor model "
				 "parallelism is disabled"));
	free(msg);
	a = make_args(2, 1, 1);
	a.sequence_parallel = true;
	CHECK_INT(layout_capture(&l, &a, 2, &msg), 0);
	CHECK(l.sp);
	CHECK_STR(msg, "");
	free(msg);
}

/* initialize_model_parallel's checks of the order. */
static void test_check_order(void)
{
	struct args a = make_args(1, 2, 2);
	struct dist_layout l;
	char *msg;
	CHECK_INT(dist_layout_from_args(&l, &a, 8), 0);
	CHECK_INT(l.dp, 2);
	CHECK_INT(l.edp, 4);
	CHECK_INT(dist_check_order(&l, NULL), 0);
	CHECK_INT(dist_check_order(&l, DIST_ORDER_DEFAULT), 0);
	/* pp before dp with cp > 1: expert dp (4) spans cp, dense dp (2) does not */
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	CHECK_INT(dist_check_order(&l, DIST_ORDER_TP_PP_DP), -1);
	msg = test_capture_end(&cap);
	CHECK(msg && strstr(msg, "expert data-parallel size 4") && strstr(msg, "data-parallel size 2") &&
	      strstr(msg, "--context-parallel-size 2"));
	free(msg);
	/* no context parallelism, or no pipeline: fine either way */
	a = make_args(2, 2, 1);
	CHECK_INT(dist_layout_from_args(&l, &a, 8), 0);
	CHECK_INT(dist_check_order(&l, DIST_ORDER_TP_PP_DP), 0);
	a = make_args(1, 1, 2);
	CHECK_INT(dist_layout_from_args(&l, &a, 8), 0);
	CHECK_INT(dist_check_order(&l, DIST_ORDER_TP_PP_DP), 0);
}

static void test_rank_gen_init(void)
{
	struct rank_gen g;
	char *msg;
	/* an order may leave out size-1 axes: they are appended */
	CHECK_INT(init_capture(&g, 2, 1, 2, 2, 1, "tp-dp-pp", &msg), 0);
	CHECK_STR(msg, "");
	free(msg);
	CHECK_INT(g.norder_given, 3);
	CHECK_INT(g.order[0], DIST_TP);
	CHECK_INT(g.order[1], DIST_DP);
	CHECK_INT(g.order[2], DIST_PP);
	CHECK_INT(g.order[3], DIST_EP); /* Megatron appends tp, pp, dp, ep, cp */
	CHECK_INT(g.order[4], DIST_CP);
	CHECK_GROUPS(&g, DP, "[0,2] [1,3] [4,6] [5,7]");
	/* Megatron lower-cases the order and tolerates its size-1 gtp_remat axis */
	CHECK_INT(init_capture(&g, 2, 1, 2, 2, 1, "TP-gtp_remat-CP-EP-DP-PP", &msg), 0);
	CHECK_STR(msg, "");
	free(msg);
	CHECK_INT(g.norder_given, 5);
	CHECK_GROUPS(&g, PP, "[0,4] [1,5] [2,6] [3,7]");

	/* an axis of size > 1 missing from the order */
	CHECK_INT(init_capture(&g, 2, 1, 2, 2, 1, "tp-dp", &msg), -1);
	CHECK(msg && strstr(msg, "pp size is 2") && strstr(msg, "'tp-dp'"));
	free(msg);
	/* unknown, repeated and empty axis names */
	CHECK_INT(init_capture(&g, 2, 1, 2, 2, 1, "tp-xp-dp-pp", &msg), -1);
	CHECK(msg && strstr(msg, "unknown axis 'xp'"));
	free(msg);
	CHECK_INT(init_capture(&g, 2, 1, 2, 2, 1, "tp-dp-pp-dp", &msg), -1);
	CHECK(msg && strstr(msg, "'dp' appears twice"));
	free(msg);
	CHECK_INT(init_capture(&g, 2, 1, 2, 2, 1, "tp--dp-pp", &msg), -1);
	CHECK(msg && strstr(msg, "unknown axis ''"));
	free(msg);
	/* ep and cp both > 1 in one generator */
	CHECK_INT(init_capture(&g, 1, 2, 1, 1, 2, DIST_ORDER_DEFAULT, &msg), -1);
	CHECK(msg && strstr(msg, "cannot both exceed 1"));
	free(msg);
	CHECK_INT(init_capture(&g, 1, 1, 0, 1, 1, DIST_ORDER_DEFAULT, &msg), -1);
	CHECK(msg && strstr(msg, "dp size 0"));
	free(msg);

	/* a rank outside the world */
	CHECK_INT(rank_gen_init(&g, 2, 1, 2, 1, 1, DIST_ORDER_DEFAULT), 0);
	int c[DIST_NAXES], m[2];
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	CHECK_INT(rank_gen_coords(&g, 4, c), -1);
	CHECK_INT(rank_gen_coords(&g, -1, c), -1);
	CHECK_INT(rank_gen_group_of(&g, TP, 4, m, NULL), -1);
	msg = test_capture_end(&cap);
	CHECK(msg && strstr(msg, "rank 4 is outside the world of 4 ranks"));
	free(msg);
}

static void test_embedding_ranks(void)
{
	int out[2];
	static const int one[] = { 5 };
	CHECK_INT(dist_embedding_ranks(one, 1, true, out), 1);
	CHECK_INT(out[0], 5);
	CHECK_INT(dist_embedding_ranks(one, 1, false, out), 1);
	static const int four[] = { 3, 7, 11, 15 };
	CHECK_INT(dist_embedding_ranks(four, 4, true, out), 2);
	CHECK_INT(out[0], 3);
	CHECK_INT(out[1], 15);
	CHECK_INT(dist_embedding_ranks(four, 4, false, out), 1);
	CHECK_INT(out[0], 3);
	/* sorted even if a caller's group is not */
	static const int down[] = { 9, 1 };
	CHECK_INT(dist_embedding_ranks(down, 2, true, out), 2);
	CHECK_INT(out[0], 1);
	CHECK_INT(out[1], 9);
	CHECK_INT(dist_position_embedding_ranks(four, 4, out), 1);
	CHECK_INT(out[0], 3);
}

/* ---------------------------------------------------------------- property */

struct layout_case {
	int tp, cp, ep, dp, pp, world;
	char order[48];
};

static uint64_t rng_next(uint64_t *s)
{
	/* xorshift64*: deterministic, so a failure reproduces */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

#define NCASES 400

/* Random layouts: world up to 64, at most one of ep and cp above 1 (one
 * generator never has both), the two training orders and random
 * permutations of the axes that leave out some size-1 axes. */
static void make_cases(struct layout_case *c, int n)
{
	uint64_t s = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < n; i++) {
		int size[DIST_NAXES], prod = 1;
		int pick[DIST_NAXES] = { 0, 1, 2, 3, 4 };
		for (int k = DIST_NAXES - 1; k > 0; k--) { /* random axis sequence */
			int j = (int)(rng_next(&s) % (uint64_t)(k + 1)), t = pick[k];
			pick[k] = pick[j];
			pick[j] = t;
		}
		for (int k = 0; k < DIST_NAXES; k++) {
			int cap = 64 / prod < 6 ? 64 / prod : 6;
			int v = 1 + (int)(rng_next(&s) % (uint64_t)cap);
			if (rng_next(&s) % 3 == 0)
				v = 1;
			size[pick[k]] = v;
			prod *= v;
		}
		if (size[DIST_EP] > 1 && size[DIST_CP] > 1)
			size[rng_next(&s) % 2 ? DIST_EP : DIST_CP] = 1;
		c[i].tp = size[DIST_TP];
		c[i].cp = size[DIST_CP];
		c[i].ep = size[DIST_EP];
		c[i].dp = size[DIST_DP];
		c[i].pp = size[DIST_PP];
		c[i].world = c[i].tp * c[i].cp * c[i].ep * c[i].dp * c[i].pp;
		int kind = (int)(rng_next(&s) % 4);
		if (kind == 0 || kind == 1) {
			snprintf(c[i].order, sizeof(c[i].order), "%s",
				 kind ? DIST_ORDER_TP_PP_DP : DIST_ORDER_DEFAULT);
			continue;
		}
		for (int k = DIST_NAXES - 1; k > 0; k--) {
			int j = (int)(rng_next(&s) % (uint64_t)(k + 1)), t = pick[k];
			pick[k] = pick[j];
			pick[j] = t;
		}
		c[i].order[0] = 0;
		for (int k = 0; k < DIST_NAXES; k++) {
			if (size[pick[k]] == 1 && rng_next(&s) % 3 == 0)
				continue; /* left out: must be appended */
			if (c[i].order[0])
				strcat(c[i].order, "-");
			strcat(c[i].order, dist_axis_name((enum dist_axis)pick[k]));
		}
		if (!c[i].order[0]) /* all left out: name one */
			strcat(c[i].order, "dp");
	}
}

/* Megatron's group algorithm transcribed afresh in Python, and the comparison. */
static const char py_groups[] =
	"D = sys.argv[1]\n"
	"BITS = ['tp', 'cp', 'ep', 'dp', 'pp']  # enum dist_axis: bit i of a mask\n"
	"\n"
	"def get_ranks(sizes, order, token):\n"
	"    # the order's axes, then the missing ones (all of size 1)\n"
	"    axes = order.lower().split('-')\n"
	"    for name in BITS:\n"
	"        if name not in axes:\n"
	"            assert sizes[name] == 1\n"
	"            axes.append(name)\n"
	"    n = [sizes[a] for a in axes]\n"
	"    # 2. stride[i] = n0 * ... * n(i-1)\n"
	"    stride = [1]\n"
	"    for x in n[:-1]:\n"
	"        stride.append(stride[-1] * x)\n"
	"    world = stride[-1] * n[-1]\n"
	"    # 1. masked (in token) and unmasked axes, in generator order\n"
	"    masked = [i for i, a in enumerate(axes) if a in token]\n"
	"    unmasked = [i for i, a in enumerate(axes) if a not in token]\n"
	"    # 3. group_size, num_groups\n"
	"    group_size = 1\n"
	"    for i in masked:\n"
	"        group_size *= n[i]\n"
	"    num_groups = world // group_size\n"
	"    def coords(v, which):  # mixed radix, first axis fastest\n"
	"        out = []\n"
	"        for i in which:\n"
	"            out.append((i, v % n[i]))\n"
	"            v //= n[i]\n"
	"        return out\n"
	"    groups = []\n"
	"    for gi in range(num_groups):  # 4./5.\n"
	"        base = sum(c * stride[i] for i, c in coords(gi, unmasked))\n"
	"        groups.append([base + sum(c * stride[i] for i, c in coords(j, masked))\n"
	"                       for j in range(group_size)])\n"
	"    return groups\n"
	"\n"
	"cases = [l.split() for l in open(os.path.join(D, 'cases.txt'))]\n"
	"ours = open(os.path.join(D, 'c_groups.txt')).read().splitlines()\n"
	"lines = bad = 0\n"
	"for ci, (world, order, tp, cp, ep, dp, pp) in enumerate(cases):\n"
	"    sizes = dict(tp=int(tp), cp=int(cp), ep=int(ep), dp=int(dp), pp=int(pp))\n"
	"    for mask in range(32):\n"
	"        token = [BITS[b] for b in range(5) if mask >> b & 1]\n"
	"        groups = get_ranks(sizes, order, token)\n"
	"        assert sum(len(g) for g in groups) == int(world)\n"
	"        want = '%d %d %s' % (ci, mask, ' '.join(','.join(map(str, g)) for g in groups))\n"
	"        if lines >= len(ours) or ours[lines] != want:\n"
	"            bad += 1\n"
	"            if bad <= 5:\n"
	"                print('mismatch', order, sizes, token)\n"
	"                print('  python', want)\n"
	"                print('  C     ', ours[lines] if lines < len(ours) else '(none)')\n"
	"        lines += 1\n"
	"print('lines', lines, 'of', len(ours), 'bad', bad)\n";

/* Against the Python transcription of Megatron's group algorithm. */
static void test_groups_vs_python(void)
{
	struct layout_case *c = xcalloc(NCASES, sizeof(*c));
	make_cases(c, NCASES);
	char *dir = test_tmpdir("layout");
	char path[4200];
	snprintf(path, sizeof(path), "%s/cases.txt", dir);
	FILE *fc = fopen(path, "w");
	snprintf(path, sizeof(path), "%s/c_groups.txt", dir);
	FILE *fg = fopen(path, "w");
	CHECK(fc && fg);
	if (!fc || !fg)
		return;
	for (int i = 0; i < NCASES; i++) {
		fprintf(fc, "%d %s %d %d %d %d %d\n", c[i].world, c[i].order, c[i].tp, c[i].cp, c[i].ep,
			c[i].dp, c[i].pp);
		struct rank_gen g;
		CHECK_INT(rank_gen_init(&g, c[i].tp, c[i].ep, c[i].dp, c[i].pp, c[i].cp, c[i].order), 0);
		for (unsigned mask = 0; mask < 32; mask++) {
			int *r, gs, ng;
			rank_gen_groups(&g, mask, &r, &gs, &ng);
			fprintf(fg, "%d %u", i, mask);
			for (int k = 0; k < ng * gs; k++)
				fprintf(fg, "%c%d", k % gs ? ',' : ' ', r[k]);
			fputc('\n', fg);
			free(r);
		}
	}
	fclose(fc);
	fclose(fg);
	char *out = test_python(dir, "import sys, os\n", py_groups);
	CHECK(out != NULL);
	if (out) {
		char expect[64];
		snprintf(expect, sizeof(expect), "lines %d of %d bad 0\n", NCASES * 32, NCASES * 32);
		CHECK_STR(out, expect);
		free(out);
	}
	free(dir);
	free(c);
}

/* Every rank once per token; group_of agrees with groups; the coordinates
 * round-trip; the group sizes multiply out. */
static void test_groups_properties(void)
{
	struct layout_case *c = xcalloc(NCASES, sizeof(*c));
	make_cases(c, NCASES);
	int *seen = xmalloc(64 * sizeof(*seen)), *m = xmalloc(64 * sizeof(*m));
	int failures = 0;
	for (int i = 0; i < NCASES && failures < 5; i++) {
		struct rank_gen g;
		CHECK_INT(rank_gen_init(&g, c[i].tp, c[i].ep, c[i].dp, c[i].pp, c[i].cp, c[i].order), 0);
		CHECK_INT(g.world, c[i].world);
		int before = t_checks_failed;
		for (int r = 0; r < g.world; r++) {
			int co[DIST_NAXES];
			CHECK_INT(rank_gen_coords(&g, r, co), 0);
			CHECK_INT(rank_gen_rank(&g, co), r);
		}
		for (unsigned mask = 0; mask < 32; mask++) {
			int *r, gs, ng;
			rank_gen_groups(&g, mask, &r, &gs, &ng);
			CHECK_INT(gs, rank_gen_group_size(&g, mask));
			CHECK_INT(gs * ng, g.world);
			CHECK_INT(rank_gen_group_size(&g, mask) * rank_gen_group_size(&g, DIST_ALL_AXES & ~mask),
				  g.world);
			memset(seen, 0, 64 * sizeof(*seen));
			for (int k = 0; k < g.world; k++)
				if (r[k] >= 0 && r[k] < g.world)
					seen[r[k]]++;
			for (int k = 0; k < g.world; k++)
				CHECK_INT(seen[k], 1);
			for (int gi = 0; gi < ng; gi++)
				for (int j = 0; j < gs; j++) {
					int idx = -1, rank = r[gi * gs + j];
					CHECK_INT(rank_gen_group_of(&g, mask, rank, m, &idx), gi);
					CHECK_INT(idx, j);
					CHECK(!memcmp(m, r + gi * gs, (size_t)gs * sizeof(*m)));
					/* members differ from rank only on the masked axes */
					int a[DIST_NAXES], b[DIST_NAXES];
					rank_gen_coords(&g, rank, a);
					rank_gen_coords(&g, r[gi * gs], b);
					for (int ax = 0; ax < DIST_NAXES; ax++)
						if (!(mask & DIST_BIT(ax)))
							CHECK_INT(a[ax], b[ax]);
				}
			free(r);
		}
		if (t_checks_failed != before) {
			printf("#   case %d: world %d order %s tp %d cp %d ep %d dp %d pp %d\n", i, c[i].world,
			       c[i].order, c[i].tp, c[i].cp, c[i].ep, c[i].dp, c[i].pp);
			failures++;
		}
	}
	free(seen);
	free(m);
	free(c);
}

/* Interleaving: chunks per rank from --num-layers-per-virtual-pipeline-stage
 * (layers per stage / n) or --num-virtual-stages-per-pipeline-rank, as
 * Megatron's validate_args derives them, and its refusals. */
static void test_virtual_stages(void)
{
	struct args a = make_args(1, 2, 1); /* 8 layers, 4 per stage */
	struct dist_layout l;
	CHECK_INT(dist_layout_from_args(&l, &a, 2), 0);
	CHECK_INT(l.vpp, 1);
	a.num_layers_per_virtual_pipeline_stage = 1;
	CHECK_INT(dist_layout_from_args(&l, &a, 2), 0);
	CHECK_INT(l.vpp, 4);
	a.num_layers_per_virtual_pipeline_stage = 2;
	CHECK_INT(dist_layout_from_args(&l, &a, 4), 0);
	CHECK_INT(l.vpp, 2);
	CHECK_INT(l.dp, 2);
	a.num_layers_per_virtual_pipeline_stage = 4; /* the whole stage: no interleaving */
	CHECK_INT(dist_layout_from_args(&l, &a, 2), 0);
	CHECK_INT(l.vpp, 1);
	a.num_layers_per_virtual_pipeline_stage = 3;
	expect_refusal(&a, 2, (const char *const[]){ "4 layers per stage", "--num-layers-per-virtual-pipeline-stage 3",
						     NULL });
	a.num_layers_per_virtual_pipeline_stage = -1;
	a.num_virtual_stages_per_pipeline_rank = 2;
	CHECK_INT(dist_layout_from_args(&l, &a, 2), 0);
	CHECK_INT(l.vpp, 2);
	a.num_virtual_stages_per_pipeline_rank = 3; /* 8 layers over 2 x 3 chunks: the model's fit refuses it */
	CHECK_INT(dist_layout_from_args(&l, &a, 2), 0);
	CHECK_INT(l.vpp, 3);
	a.num_virtual_stages_per_pipeline_rank = 2;
	a.num_layers_per_virtual_pipeline_stage = 2;
	expect_refusal(&a, 2, (const char *const[]){ "at most one of", NULL });
	a = make_args(1, 1, 1);
	a.num_virtual_stages_per_pipeline_rank = 2;
	expect_refusal(&a, 1, (const char *const[]){ "needs --pipeline-model-parallel-size > 1", NULL });
	a = make_args(1, 2, 1);
	a.num_virtual_stages_per_pipeline_rank = 0;
	expect_refusal(&a, 2, (const char *const[]){ "must be positive", NULL });
}

/* ---------------------------------------------------------------- the model's fit */

/* gpt_config_check_layout with stderr captured into *msg (caller frees). */
static int fit_capture(const struct gpt_config *c, const struct gpt_layout *lay, char **msg)
{
	struct test_capture cap;
	test_capture_begin(&cap, 2);
	int r = gpt_config_check_layout(c, lay, NULL);
	*msg = test_capture_end(&cap);
	return r;
}

static void expect_fit(const struct gpt_config *c, const struct gpt_layout *lay, const char *const *needles)
{
	char *msg;
	CHECK_INT(fit_capture(c, lay, &msg), *needles ? -1 : 0);
	for (; *needles; needles++)
		if (!msg || !strstr(msg, *needles)) {
			printf("#   message \"%s\" lacks \"%s\"\n", msg ? msg : "(null)", *needles);
			CHECK(0);
		}
	free(msg);
}

static struct gpt_config fit_model(void)
{
	struct gpt_config c;
	memset(&c, 0, sizeof(c));
	c.L = 6, c.h = 48, c.a = 12, c.g = 12, c.k = 4, c.f = 96, c.S = 16, c.P = 16, c.V = 190, c.Vp = 192;
	return c;
}

/* One function decides whether a model fits a layout, and names every rule
 * the layout breaks in one message. */
static void test_model_fit(void)
{
	struct gpt_config c = fit_model();
	struct gpt_layout lay = { .tp = 4, .pp = 2, .vpp = 1, .cp = 1, .ep = 1, .sp = true };
	expect_fit(&c, &lay, (const char *const[]){ NULL });
	/* heads % tp: the message, verbatim */
	c.a = 6;
	c.g = 6;
	expect_fit(&c, &lay, (const char *const[]){
		"--num-attention-heads 6 is not divisible by --tensor-model-parallel-size 4", NULL });
	/* every reason at once */
	c.f = 90;
	c.L = 5;
	c.Vp = 190;
	expect_fit(&c, &lay, (const char *const[]){ "--num-attention-heads 6", "6 query groups",
						    "--ffn-hidden-size 90", "padded vocabulary 190",
						    "--num-layers 5 is not divisible by --pipeline-model-parallel-size 2",
						    NULL });
	/* query groups: a multiple or a divisor of TP (Megatron's rule; fewer
	 * groups than ranks gather linear_qkv's output, whose rows must still
	 * split evenly); Megatron's rules (report_memory's formula) leave the
	 * ffn and vocabulary to the model */
	c = fit_model();
	c.g = 2;
	expect_fit(&c, &lay, (const char *const[]){ NULL });
	c.g = 1;
	c.k = 3; /* (12 + 2) x 3 = 42 rows over 4 ranks */
	expect_fit(&c, &lay, (const char *const[]){ "linear_qkv's 42 output rows", NULL });
	c.k = 4;
	lay.megatron_rules = true;
	c.g = 2;
	expect_fit(&c, &lay, (const char *const[]){ NULL });
	c.g = 3;
	expect_fit(&c, &lay, (const char *const[]){ "3 query groups", "nor a divisor", NULL });
	c.g = 12;
	c.f = 90;
	expect_fit(&c, &lay, (const char *const[]){ NULL });
	c.f = 96;
	lay.megatron_rules = false;
	c.g = 12;
	/* virtual stages; an overflowing product is not a crash */
	lay.pp = 65536, lay.vpp = 65536;
	expect_fit(&c, &lay, (const char *const[]){ "--num-layers 6", NULL });
	lay.pp = 2;
	lay.vpp = 2;
	expect_fit(&c, &lay, (const char *const[]){ "--num-layers 6", "x 2 virtual stages per rank", NULL });
	lay.vpp = 1;
	/* context parallelism: 2 x cp chunks; sequence parallelism: S / cp over TP */
	lay.tp = 1, lay.pp = 1, lay.cp = 2;
	c.S = 6;
	expect_fit(&c, &lay, (const char *const[]){ "--seq-length 6 is not a multiple of 2 * --context-parallel-size 2",
						    NULL });
	c.S = 8;
	expect_fit(&c, &lay, (const char *const[]){ NULL });
	lay.tp = 3, lay.cp = 1;
	c.S = 8;
	expect_fit(&c, &lay, (const char *const[]){ "--sequence-parallel needs --seq-length 8", NULL });
	lay.sp = false;
	expect_fit(&c, &lay, (const char *const[]){ NULL });
	/* experts over EP, their ffn over TP; EP needs experts */
	lay.tp = 4, lay.ep = 4;
	c.E = 6, c.moe_f = 32;
	expect_fit(&c, &lay, (const char *const[]){
		"--num-experts 6 is not divisible by --expert-model-parallel-size 4", NULL });
	c.E = 8, c.moe_f = 30;
	expect_fit(&c, &lay, (const char *const[]){ "the experts' ffn size 30", NULL });
	c.E = 0;
	expect_fit(&c, &lay, (const char *const[]){ "--expert-model-parallel-size 4 needs mixture-of-experts", NULL });
}

int main(void)
{
	log_init("test_layout", 0, 1);
	RUN(test_example_8);
	RUN(test_example_expert);
	RUN(test_example_etp);
	RUN(test_example_16);
	RUN(test_dp_cp_order);
	RUN(test_stage_layers);
	RUN(test_constraints);
	RUN(test_model_fit);
	RUN(test_virtual_stages);
	RUN(test_check_order);
	RUN(test_rank_gen_init);
	RUN(test_embedding_ranks);
	RUN(test_groups_vs_python);
	RUN(test_stage_layers_uneven);
	RUN(test_groups_properties);
	return test_summary();
}
