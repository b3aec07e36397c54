/*
 * layout.c - see layout.h. Megatron's RankGenerator (parallel_state.py),
 * the parallel-size checks of validate_args / TransformerConfig, the GPT
 * embedding-rank rule and the uniform layer split (pretrain_gpt.py's
 * get_embedding_ranks, megatron/core/transformer/transformer_block.py).
 */
#include "dist/layout.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"

static const char *const axis_names[DIST_NAXES] = { "tp", "cp", "ep", "dp", "pp" };

const char *dist_axis_name(enum dist_axis ax)
{
	if ((unsigned)ax >= DIST_NAXES)
		BUG("axis %d out of range", (int)ax);
	return axis_names[ax];
}

/* Megatron builds its name -> size dict as tp, pp, dp, ep, cp and appends the
 * axes an order leaves out in that order. They all have size 1 there, so the
 * place is immaterial; keeping Megatron's makes order[] read the same. */
static const enum dist_axis append_order[DIST_NAXES] = { DIST_TP, DIST_PP, DIST_DP, DIST_EP, DIST_CP };

static int parse_axis(const char *s, size_t n)
{
	for (int ax = 0; ax < DIST_NAXES; ax++)
		if (n == 2 && tolower((unsigned char)s[0]) == axis_names[ax][0] &&
		    tolower((unsigned char)s[1]) == axis_names[ax][1])
			return ax;
	return -1;
}

static bool token_is(const char *s, size_t n, const char *name)
{
	if (strlen(name) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (tolower((unsigned char)s[i]) != name[i])
			return false;
	return true;
}

int rank_gen_init(struct rank_gen *g, int tp, int ep, int dp, int pp, int cp, const char *order)
{
	memset(g, 0, sizeof(*g));
	g->size[DIST_TP] = tp;
	g->size[DIST_CP] = cp;
	g->size[DIST_EP] = ep;
	g->size[DIST_DP] = dp;
	g->size[DIST_PP] = pp;
	long long world = 1;
	for (int ax = 0; ax < DIST_NAXES; ax++) {
		if (g->size[ax] < 1)
			return error("parallel layout: %s size %d must be at least 1", axis_names[ax],
				     g->size[ax]);
		world *= g->size[ax];
		if (world > (1 << 30))
			return error("parallel layout: tp %d * cp %d * ep %d * dp %d * pp %d is too many ranks",
				     tp, cp, ep, dp, pp);
	}
	/* Megatron asserts this in the constructor: CP lives only in the dense
	 * generator (ep = 1) and EP only in the expert one (cp = 1). */
	if (ep > 1 && cp > 1)
		return error("parallel layout: expert-parallel size %d and context-parallel size %d "
			     "cannot both exceed 1 in one rank generator", ep, cp);
	g->world = (int)world;

	bool seen[DIST_NAXES] = { false };
	int n = 0;
	const char *p = order ? order : "";
	for (;;) {
		const char *end = strchr(p, '-');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		int ax = parse_axis(p, len);
		if (ax < 0 && token_is(p, len, "gtp_remat")) {
			/* Megatron's weight-rematerialisation axis; megac keeps it at size
			 * 1, where it changes no rank, so an order naming it is accepted. */
		} else if (ax < 0) {
			return error("parallel layout: unknown axis '%.*s' in order '%s' (axes: tp, cp, ep, dp, pp)",
				     (int)len, p, order ? order : "");
		} else if (seen[ax]) {
			return error("parallel layout: axis '%s' appears twice in order '%s'", axis_names[ax],
				     order);
		} else {
			seen[ax] = true;
			g->order[n++] = (enum dist_axis)ax;
		}
		if (!end)
			break;
		p = end + 1;
	}
	g->norder_given = n;
	for (int i = 0; i < DIST_NAXES; i++) {
		enum dist_axis ax = append_order[i];
		if (seen[ax])
			continue;
		if (g->size[ax] != 1)
			return error("parallel layout: the %s size is %d, but order '%s' does not place %s",
				     axis_names[ax], g->size[ax], order ? order : "", axis_names[ax]);
		g->order[n++] = ax;
	}
	int stride = 1;
	for (int i = 0; i < DIST_NAXES; i++) {
		g->stride[i] = stride;
		stride *= g->size[g->order[i]];
	}
	return 0;
}

static void check_axes(unsigned axes)
{
	if (axes & ~DIST_ALL_AXES)
		BUG("axis mask 0x%x has bits beyond the %d axes", axes, DIST_NAXES);
}

int rank_gen_group_size(const struct rank_gen *g, unsigned axes)
{
	check_axes(axes);
	int n = 1;
	for (int ax = 0; ax < DIST_NAXES; ax++)
		if (axes & DIST_BIT(ax))
			n *= g->size[ax];
	return n;
}

/*
 * The masked (in `axes`) and unmasked order positions, each list in order
 * position, i.e. by increasing stride. A group index is a mixed-radix number
 * over the unmasked axes and a member index one over the masked axes, first
 * listed axis fastest (parallel_state.py's generate_masked_orthogonal_rank_groups).
 */
struct split {
	int masked[DIST_NAXES], unmasked[DIST_NAXES];
	int nmasked, nunmasked;
};

static void split_axes(const struct rank_gen *g, unsigned axes, struct split *s)
{
	s->nmasked = s->nunmasked = 0;
	for (int i = 0; i < DIST_NAXES; i++) {
		if (axes & DIST_BIT(g->order[i]))
			s->masked[s->nmasked++] = i;
		else
			s->unmasked[s->nunmasked++] = i;
	}
}

/* Σ coord·stride for `index` decomposed over the order positions pos[0..n). */
static int place(const struct rank_gen *g, const int *pos, int n, int index)
{
	int rank = 0;
	for (int k = 0; k < n; k++) {
		int size = g->size[g->order[pos[k]]];
		rank += (index % size) * g->stride[pos[k]];
		index /= size;
	}
	return rank;
}

int rank_gen_groups(const struct rank_gen *g, unsigned axes, int **out, int *group_size,
		    int *num_groups)
{
	struct split s;
	int gs = rank_gen_group_size(g, axes), ng = g->world / gs;
	split_axes(g, axes, &s);
	int *r = xmalloc((size_t)g->world * sizeof(*r));
	for (int gi = 0; gi < ng; gi++) {
		int base = place(g, s.unmasked, s.nunmasked, gi);
		for (int j = 0; j < gs; j++)
			r[(size_t)gi * gs + j] = base + place(g, s.masked, s.nmasked, j);
	}
	*out = r;
	*group_size = gs;
	*num_groups = ng;
	return 0;
}

int rank_gen_coords(const struct rank_gen *g, int rank, int coords[DIST_NAXES])
{
	if (rank < 0 || rank >= g->world)
		return error("parallel layout: rank %d is outside the world of %d ranks", rank, g->world);
	for (int i = 0; i < DIST_NAXES; i++)
		coords[g->order[i]] = rank / g->stride[i] % g->size[g->order[i]];
	return 0;
}

int rank_gen_rank(const struct rank_gen *g, const int coords[DIST_NAXES])
{
	int rank = 0;
	for (int i = 0; i < DIST_NAXES; i++) {
		enum dist_axis ax = g->order[i];
		if (coords[ax] < 0 || coords[ax] >= g->size[ax])
			BUG("%s coordinate %d outside [0, %d)", axis_names[ax], coords[ax], g->size[ax]);
		rank += coords[ax] * g->stride[i];
	}
	return rank;
}

/* Mixed-radix index of rank's coordinates over the order positions pos[]. */
static int radix_index(const struct rank_gen *g, const int coords[DIST_NAXES], const int *pos, int n)
{
	int index = 0;
	for (int k = n - 1; k >= 0; k--) {
		enum dist_axis ax = g->order[pos[k]];
		index = index * g->size[ax] + coords[ax];
	}
	return index;
}

int rank_gen_group_of(const struct rank_gen *g, unsigned axes, int rank, int *members,
		      int *index_in_group)
{
	int coords[DIST_NAXES];
	if (rank_gen_coords(g, rank, coords) < 0)
		return -1;
	struct split s;
	int gs = rank_gen_group_size(g, axes);
	split_axes(g, axes, &s);
	int base = 0;
	for (int k = 0; k < s.nunmasked; k++)
		base += coords[g->order[s.unmasked[k]]] * g->stride[s.unmasked[k]];
	for (int j = 0; j < gs; j++)
		members[j] = base + place(g, s.masked, s.nmasked, j);
	if (index_in_group)
		*index_in_group = radix_index(g, coords, s.masked, s.nmasked);
	return radix_index(g, coords, s.unmasked, s.nunmasked);
}

/* ------------------------------------------------------------ layout */

/* A parallel size flag as an int: at least 1, and small enough to multiply. */
static int size_flag(const char *flag, int64_t v, int *out)
{
	if (v < 1 || v > (1 << 20))
		return error("%s %lld: a parallel size must be between 1 and %d", flag, (long long)v, 1 << 20);
	*out = (int)v;
	return 0;
}

int dist_layout_from_args(struct dist_layout *l, const struct args *a, int world)
{
	memset(l, 0, sizeof(*l));
	if (world < 1)
		return error("parallel layout: world size %d must be at least 1", world);
	l->world = world;
	if (size_flag("--tensor-model-parallel-size", a->tensor_model_parallel_size, &l->tp) < 0 ||
	    size_flag("--pipeline-model-parallel-size", a->pipeline_model_parallel_size, &l->pp) < 0 ||
	    size_flag("--context-parallel-size", a->context_parallel_size, &l->cp) < 0 ||
	    size_flag("--expert-model-parallel-size", a->expert_model_parallel_size, &l->ep) < 0)
		return -1;

	/* validate_args: the model-parallel product must tile the world; what
	 * is left over is data parallelism. */
	int64_t model = (int64_t)l->tp * l->pp * l->cp;
	if (world % model)
		return error("world size %d is not divisible by --tensor-model-parallel-size %d * "
			     "--pipeline-model-parallel-size %d * --context-parallel-size %d = %lld",
			     world, l->tp, l->pp, l->cp, (long long)model);
	l->dp = (int)(world / model);

	/* The expert generator: --expert-tensor-parallel-size splits each
	 * expert's MLP (Megatron's default, -1, is the TP size). */
	if (a->expert_tensor_parallel_size == -1)
		l->etp = l->tp;
	else if (size_flag("--expert-tensor-parallel-size", a->expert_tensor_parallel_size, &l->etp) < 0)
		return -1;
	int64_t expert = (int64_t)l->etp * l->ep * l->pp;
	if (world % expert)
		return error("world size %d is not divisible by --expert-tensor-parallel-size %d * "
			     "--expert-model-parallel-size %d * --pipeline-model-parallel-size %d = %lld",
			     world, l->etp, l->ep, l->pp, (long long)expert);
	l->edp = (int)(world / expert);
	/* Interleaving: chunks per pipeline rank, from the layers per virtual
	 * stage or given directly (Megatron's validate_args; 1 = its None). */
	l->vpp = 1;
	int64_t nlv = a->num_layers_per_virtual_pipeline_stage, nvs = a->num_virtual_stages_per_pipeline_rank;
	if (nlv > 0 && nvs > 0)
		return error("give at most one of --num-layers-per-virtual-pipeline-stage and "
			     "--num-virtual-stages-per-pipeline-rank");
	if ((nlv != -1 && nlv < 1) || (nvs != -1 && nvs < 1))
		return error("--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank must "
			     "be positive");
	if (nlv > 0 && a->num_layers > 0) {
		int64_t per_stage = a->num_layers % l->pp ? 0 : a->num_layers / l->pp;
		if (per_stage && per_stage % nlv)
			return error("--num-layers %lld / --pipeline-model-parallel-size %d = %lld layers per stage is "
				     "not divisible by --num-layers-per-virtual-pipeline-stage %lld",
				     (long long)a->num_layers, l->pp, (long long)per_stage, (long long)nlv);
		if (per_stage)
			l->vpp = (int)(per_stage / nlv);
	}
	if (nvs > 0) {
		if (nvs > (1 << 20))
			return error("--num-virtual-stages-per-pipeline-rank %lld is too large", (long long)nvs);
		l->vpp = (int)nvs;
	}
	if (l->vpp > 1 && l->pp == 1)
		return error("the interleaved schedule (virtual pipeline stages) needs --pipeline-model-parallel-size > 1");

	/* Whether the model's shapes fit this layout (heads, groups, ffn and
	 * vocabulary over TP, layers over the pipeline, the sequence over CP,
	 * experts over EP) is gpt_config_check_layout's to say, once the model
	 * is known. */
	if (a->global_batch_size > 0 && a->micro_batch_size > 0 &&
	    a->global_batch_size % (a->micro_batch_size * l->dp))
		return error("--global-batch-size %lld is not divisible by --micro-batch-size %lld * "
			     "data-parallel size %d = %lld (data-parallel size = world size %d / "
			     "(tensor %d * pipeline %d * context %d))",
			     (long long)a->global_batch_size, (long long)a->micro_batch_size, l->dp,
			     (long long)(a->micro_batch_size * l->dp), world, l->tp, l->pp, l->cp);

	/* Megatron turns sequence parallelism off without tensor parallelism so
	 * that the numerics do not change. */
	l->sp = a->sequence_parallel;
	if (l->tp == 1 && l->sp) {
		warning("Disabling sequence parallelism because tensor model parallelism is disabled");
		l->sp = false;
	}
	return 0;
}

int dist_dense_gen(struct rank_gen *g, const struct dist_layout *l, const char *order)
{
	return rank_gen_init(g, l->tp, 1, l->dp, l->pp, l->cp, order ? order : DIST_ORDER_DEFAULT);
}

int dist_expert_gen(struct rank_gen *g, const struct dist_layout *l, const char *order)
{
	return rank_gen_init(g, l->etp, l->ep, l->edp, l->pp, 1, order ? order : DIST_ORDER_DEFAULT);
}

int dist_check_order(const struct dist_layout *l, const char *order)
{
	struct rank_gen d, e;
	if (!order)
		order = DIST_ORDER_DEFAULT;
	if (dist_dense_gen(&d, l, order) < 0 || dist_expert_gen(&e, l, order) < 0)
		return -1;
	size_t n = strlen(order);
	bool pp_last = n >= 2 && tolower((unsigned char)order[n - 2]) == 'p' &&
		       tolower((unsigned char)order[n - 1]) == 'p';
	/* With pp inside, a pipeline group strides over the data-parallel ranks,
	 * and dense and expert layers only line up when both data domains are
	 * the same size. */
	if (!pp_last && l->pp > 1 && l->edp != l->dp)
		return error("parallel order '%s' (pp not last) needs the expert data-parallel size %d to "
			     "equal the data-parallel size %d (--context-parallel-size %d, "
			     "--expert-model-parallel-size %d)",
			     order, l->edp, l->dp, l->cp, l->ep);
	int *pd, *pe, gsd, ngd, gse, nge;
	rank_gen_groups(&d, DIST_BIT(DIST_PP), &pd, &gsd, &ngd);
	rank_gen_groups(&e, DIST_BIT(DIST_PP), &pe, &gse, &nge);
	bool same = gsd == gse && ngd == nge && !memcmp(pd, pe, (size_t)l->world * sizeof(*pd));
	free(pd);
	free(pe);
	if (!same)
		return error("parallel order '%s': the dense and expert layers would get different "
			     "pipeline groups", order);
	return 0;
}

int dist_embedding_ranks(const int *pp_group, int pp, bool tied, int *out)
{
	if (pp < 1)
		BUG("pipeline group of %d ranks", pp);
	int n = 0;
	out[n++] = pp_group[0];
	/* With untied weights the output layer has its own matrix and the last
	 * stage has nothing to synchronise with the first. */
	if (pp > 1 && tied && pp_group[pp - 1] != pp_group[0])
		out[n++] = pp_group[pp - 1];
	if (n == 2 && out[1] < out[0]) {
		int t = out[0];
		out[0] = out[1];
		out[1] = t;
	}
	return n;
}

int dist_position_embedding_ranks(const int *pp_group, int pp, int *out)
{
	if (pp < 1)
		BUG("pipeline group of %d ranks", pp);
	out[0] = pp_group[0];
	return 1;
}

/* Layers of stage s, all its chunks, under a split dist_split_check passed. */
static int split_stage_total(const struct dist_split *s, int stage)
{
	if (stage == 0 && s->first)
		return s->first;
	if (stage == s->pp - 1 && s->last)
		return s->last;
	int middle = s->pp - (s->first > 0) - (s->last > 0);
	return (s->L - s->first - s->last) / middle;
}

const char *dist_split_check(const struct dist_split *s)
{
	if (s->pp < 1 || s->vpp < 1 || s->L < 0 || s->first < 0 || s->last < 0)
		return "a negative size";
	if (!s->first && !s->last)
		return s->L % ((int64_t)s->pp * s->vpp) ? "the layers do not divide evenly over the stages" : NULL;
	if (s->pp == 1)
		return "uneven pipeline stages need more than one stage";
	if (s->first % s->vpp || s->last % s->vpp)
		return "the first or last stage's layers do not divide over its model chunks";
	int middle = s->pp - (s->first > 0) - (s->last > 0);
	int rest = s->L - s->first - s->last;
	if (rest < 0)
		return "the first and last stages hold more layers than the model has";
	if ((rest > 0) != (middle > 0))
		return rest ? "layers are left over with no stage between the first and last to hold them"
			    : "the stages between the first and last get no layers";
	if (middle && (rest % middle || (rest / middle) % s->vpp))
		return "the layers left for the stages between the first and last do not divide evenly over them "
		       "and their model chunks";
	return NULL;
}

void dist_stage_layers(const struct dist_split *s, int stage, int vstage, int *first, int *count)
{
	if (dist_split_check(s) || stage < 0 || stage >= s->pp || vstage < 0 || vstage >= s->vpp)
		BUG("stage %d/%d, virtual stage %d/%d of %d layers (first %d, last %d)", stage, s->pp, vstage, s->vpp,
		    s->L, s->first, s->last);
	/* round vstage holds 1/vpp of every stage's layers, stage by stage */
	int before = 0;
	for (int q = 0; q < stage; q++)
		before += split_stage_total(s, q) / s->vpp;
	*first = vstage * (s->L / s->vpp) + before;
	*count = split_stage_total(s, stage) / s->vpp;
}
