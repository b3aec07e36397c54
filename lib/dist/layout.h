/*
 * layout.h - which rank does what: Megatron's process-group layout as pure
 * arithmetic (Megatron's megatron/core/parallel_state.py: RankGenerator,
 * initialize_model_parallel).
 *
 * Megatron numbers ranks by a mixed radix over the parallel axes in the order
 * "tp-cp-ep-dp-pp" (leftmost fastest) and builds every process group from
 * one enumeration, RankGenerator.get_ranks(token). This module reproduces
 * that enumeration exactly - same groups, same group order, same member order
 * - so that a megac run on N ranks puts tensor shards, pipeline stages and
 * data shards on the same ranks a Megatron run would, and so that every rank
 * can build every communicator in the same order (creation is collective).
 * Nothing here talks to MPI; the distributed driver turns these lists into
 * communicators.
 *
 * Not modelled (sizes fixed at 1 or absent): the GTP weight-rematerialisation
 * axis, hierarchical / hybrid CP, distributed-optimizer instances > 1, MTP
 * stages in the embedding group, uneven first/last pipeline stages.
 */
#ifndef MEGAC_DIST_LAYOUT_H
#define MEGAC_DIST_LAYOUT_H

#include <stdbool.h>

#include "base/args.h"

/* The axes a generator knows. A group "token" is a bit mask of 1u << axis. */
enum dist_axis { DIST_TP, DIST_CP, DIST_EP, DIST_DP, DIST_PP, DIST_NAXES };

#define DIST_BIT(ax) (1u << (ax))
#define DIST_ALL_AXES ((1u << DIST_NAXES) - 1)

/* The order string Megatron's training entry point passes, and the one
 * --use-tp-pp-dp-mapping selects. */
#define DIST_ORDER_DEFAULT "tp-cp-ep-dp-pp"
#define DIST_ORDER_TP_PP_DP "tp-cp-ep-pp-dp"

/* "tp", "cp", "ep", "dp", "pp". */
const char *dist_axis_name(enum dist_axis ax);

/*
 * Megatron's RankGenerator. order[] holds the axes of the order string as
 * given, followed by the axes it left out (all of size 1, appended in
 * Megatron's order tp, pp, dp, ep, cp, which places them nowhere that
 * matters); stride[i] belongs to order[i]; size[] is indexed by axis.
 */
struct rank_gen {
	int size[DIST_NAXES];
	enum dist_axis order[DIST_NAXES];
	int stride[DIST_NAXES];
	int norder_given; /* how many axes the order string named */
	int world;        /* product of the sizes */
};

/*
 * Set up a generator (argument order as Megatron's constructor). The order is
 * "-"-separated axis names (case-insensitive); error() for an unknown or
 * repeated name, an axis of size > 1 the order leaves out, a size below 1,
 * or ep > 1 together with cp > 1 (Megatron keeps CP to the dense generator
 * and EP to the expert one).
 */
int rank_gen_init(struct rank_gen *g, int tp, int ep, int dp, int pp, int cp, const char *order);

/* Product of the sizes of the axes in `axes`: the size of each such group. */
int rank_gen_group_size(const struct rank_gen *g, unsigned axes);

/*
 * Every group spanning the axes in `axes` (a mask of DIST_BIT()s; 0 gives
 * singletons), in Megatron's get_ranks order: *out (xmalloc'd, caller frees)
 * holds num_groups rows of group_size ranks, group g's member j at
 * (*out)[g * group_size + j]. Returns 0.
 */
int rank_gen_groups(const struct rank_gen *g, unsigned axes, int **out, int *group_size,
		    int *num_groups);

/* The coordinate of `rank` on each axis (indexed by enum dist_axis).
 * error() when rank is not in [0, world). */
int rank_gen_coords(const struct rank_gen *g, int rank, int coords[DIST_NAXES]);

/* The inverse: the rank at those coordinates (each must be in range). */
int rank_gen_rank(const struct rank_gen *g, const int coords[DIST_NAXES]);

/*
 * The group spanning `axes` that holds `rank`: fills members[] (room for
 * rank_gen_group_size() ints) exactly as rank_gen_groups lists that group,
 * and *index_in_group (may be NULL) with rank's position in it. Returns the
 * group's index in rank_gen_groups' list, or -1 after error() for a bad rank.
 */
int rank_gen_group_of(const struct rank_gen *g, unsigned axes, int rank, int *members,
		      int *index_in_group);

/*
 * The parallel layout of one training run: world = tp·pp·cp·dp for the dense
 * part, world = etp·ep·pp·edp for the expert part (etp:
 * --expert-tensor-parallel-size, by default tp). vpp is the number of virtual pipeline
 * stages per rank (model chunks), 1 = no interleaving. sp is
 * --sequence-parallel after Megatron's tp == 1 rule.
 */
struct dist_layout {
	int world, tp, pp, cp, ep, etp, dp, edp, vpp;
	bool sp;
};

/*
 * Derive the layout of a GPT training run on `world` ranks from the flags and
 * check what Megatron checks (initialize_model_parallel, validate_args,
 * TransformerConfig) about the ranks: world divisible by tp·pp·cp (and by
 * etp·ep·pp), virtual stages given consistently, global batch by micro
 * batch · dp. Whether the model's shapes fit the layout (heads, groups,
 * layers, sequence, experts) is gpt_config_check_layout's to say (model/
 * gpt_config.h), once the model is known. Flags still at their "not given" value (-1) are
 * left to the checks that own them. tp == 1 turns --sequence-parallel off
 * with a warning. Returns 0, or -1 after error() naming the flags.
 */
int dist_layout_from_args(struct dist_layout *l, const struct args *a, int world);

/* Whether the experts' tensors form a part of their own, reduced over the
 * expert-data-parallel group and gathered over the expert-tensor-parallel
 * one: with expert parallelism, or an expert TP size other than TP. */
static inline bool dist_experts_apart(const struct dist_layout *l)
{
	return l->ep > 1 || l->etp != l->tp;
}

/* The dense generator (tp, ep = 1, dp, pp, cp) and the expert generator
 * (etp, ep, edp, pp, cp = 1) of a layout, under `order` (NULL: the default). */
int dist_dense_gen(struct rank_gen *g, const struct dist_layout *l, const char *order);
int dist_expert_gen(struct rank_gen *g, const struct dist_layout *l, const char *order);

/*
 * What initialize_model_parallel checks of a layout under `order` (NULL: the
 * default): both generators build, an order that does not end in pp with
 * pp > 1 needs edp == dp (with cp > 1 it never holds, since edp spans
 * cp), and the two generators give the same pipeline groups.
 */
int dist_check_order(const struct dist_layout *l, const char *order);

/*
 * Embedding ranks of one pipeline group pp_group[0..pp) (first stage first),
 * by pretrain_gpt.py's rule: the first stage, plus the last stage when pp > 1
 * and the input embedding and output layer are tied; sorted, no duplicates.
 * Writes them to out (room for 2) and returns how many.
 */
int dist_embedding_ranks(const int *pp_group, int pp, bool tied, int *out);

/* Position-embedding ranks: the first stage only. Returns 1. */
int dist_position_embedding_ranks(const int *pp_group, int pp, int *out);

/*
 * How the L transformer layers split over pp pipeline stages of vpp model
 * chunks each: evenly, or (Megatron's uneven pipeline) with `first` layers on
 * the first stage and `last` on the last (0: that stage is split like the
 * others), the stages in between sharing the rest evenly.
 */
struct dist_split {
	int L, pp, vpp;
	int first, last; /* --decoder-first/last-pipeline-num-layers, 0: not given */
};

/*
 * The transformer layers of pipeline stage `stage` (0..pp), virtual stage
 * `vstage` (0..vpp): *first (0-based global layer number) and *count.
 * Interleaving deals the layers out in vpp rounds of L/vpp layers: round v
 * gives each stage, in pipeline order, 1/vpp of that stage's layers.
 * dist_split_check must have passed.
 */
void dist_stage_layers(const struct dist_split *s, int stage, int vstage, int *first, int *count);

/*
 * Whether a split is possible, as Megatron's TransformerConfig checks it:
 * without first/last, L divisible by pp·vpp; with them, pp > 1, each given
 * count positive and divisible by vpp, and the layers left for the stages
 * in between (there must be some exactly when there are such stages)
 * divisible by their number, each share by vpp. Returns NULL when it is,
 * or a static description of what does not divide.
 */
const char *dist_split_check(const struct dist_split *s);

#endif
