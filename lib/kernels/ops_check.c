/*
 * ops_check.c - see ops.h (kops_missing, kops_check): every op of a table,
 * by name and place in struct kops, so a table built without one is a BUG
 * at start-up naming it rather than a NULL call in the middle of a run.
 * A new op in struct kops goes into OPS below too; test_ops checks that the
 * list covers the whole struct. Ops marked optional (OPT) are ones a backend
 * may not have yet (the Mamba-2 mixer's, CPU only for now): kops_missing
 * passes over them, and a caller that needs one checks its pointer.
 */
#include "kernels/ops.h"

#include <stddef.h>
#include <string.h>

#include "base/error.h"

#define OP(name) { #name, offsetof(struct kops, name), false }
#define OPT(name) { #name, offsetof(struct kops, name), true }
static const struct {
	const char *name;
	size_t off;
	bool optional;
} OPS[] = {
	OP(alloc), OP(free), OP(to_host), OP(to_device), OP(zero), OP(copy), OP(copy_rows), OP(host_alloc), OP(host_free),
	OP(linear_forward), OP(linear_backward), OP(linear_forward_w16), OP(linear_backward_w16),
	OP(embedding_forward), OP(embedding_backward), OP(embedding_forward_w16),
	OP(layernorm_forward), OP(layernorm_backward), OP(rmsnorm_forward), OP(rmsnorm_backward),
	OP(gelu_forward), OP(gelu_backward), OP(swiglu_forward), OP(swiglu_backward), OP(qkv_split_forward),
	OP(qkv_split_backward), OP(attention_forward), OP(attention_backward), OP(dropout_add_forward),
	OP(dropout_backward), OP(xent_forward), OP(xent_backward), OP(add), OP(scale), OP(sumsq), OP(nonfinite),
	OP(round), OP(narrow), OP(widen), OP(adamw), OP(moe_combine_forward), OP(moe_combine_backward), OP(sumsq_segs), OP(adamw_segs),
	OP(adamw_segs_lp), OP(fp8_amax), OP(fp8_quantize), OP(fp8_gemm), OP(fp8_transpose),
	OP(fp8_amax_blocks), OP(fp8_quantize_blocks),
	OP(attention_block_forward), OP(attention_block_backward),
	OPT(ssm_conv_forward), OPT(ssm_conv_backward), OPT(ssd_scan_forward), OPT(ssd_scan_backward),
	OPT(gated_rmsnorm_forward), OPT(gated_rmsnorm_backward),
};
#undef OP
#undef OPT

int kops_count(void)
{
	return (int)(sizeof(OPS) / sizeof(OPS[0]));
}

const char *kops_op_name(int i)
{
	return i >= 0 && i < kops_count() ? OPS[i].name : NULL;
}

bool kops_op_optional(int i)
{
	return i >= 0 && i < kops_count() && OPS[i].optional;
}

kops_fn kops_op(const struct kops *k, int i)
{
	kops_fn fn = NULL;
	if (i >= 0 && i < kops_count())
		memcpy(&fn, (const char *)k + OPS[i].off, sizeof fn);
	return fn;
}

const char *kops_missing(const struct kops *k)
{
	for (int i = 0; i < kops_count(); i++)
		if (!OPS[i].optional && !kops_op(k, i))
			return OPS[i].name;
	return NULL;
}

void kops_check(const struct kops *k)
{
	const char *m = kops_missing(k);
	if (m)
		BUG("the %s op table has no %s: every op of struct kops must be filled (ops.h)", k->name ? k->name : "?",
		    m);
}
