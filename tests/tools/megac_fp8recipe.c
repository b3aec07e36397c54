/*
 * megac_fp8recipe - the delayed FP8 recipe's update (fp8_update_meta) on
 * one meta, for tests/prog/py/fp8_recipe.py to hold against its own
 * transcription of Transformer Engine's amax_and_scale_update.
 *
 *   megac_fp8recipe LEN ALGO MARGIN FMT   (ALGO max|most_recent, FMT e4m3|e5m2)
 *
 * Reads one amax per line (a float in any strtof syntax: hex floats, inf,
 * nan) as the reduced amax of an iteration; after each prints the history
 * (LEN values) and the scale as hex floats on one line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "kernels/fp8.h"
#include "model/gpt.h"

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: megac_fp8recipe LEN max|most_recent MARGIN e4m3|e5m2\n");
		return 2;
	}
	int len = atoi(argv[1]), margin = atoi(argv[3]);
	bool amax_max = !strcmp(argv[2], "max");
	enum kops_fp8 fmt = !strcmp(argv[4], "e5m2") ? KOPS_E5M2 : KOPS_E4M3;
	if (len < 1)
		return 2;
	float *h = calloc((size_t)len, sizeof(float)), scale = 1.0f;
	float scaled_max = ldexpf(fp8_max(fmt), -margin);
	char line[256];
	while (fgets(line, sizeof(line), stdin)) {
		h[0] = strtof(line, NULL);
		fp8_update_meta(h, len, &scale, amax_max, scaled_max);
		for (int i = 0; i < len; i++)
			printf("%a ", (double)h[i]);
		printf("%a\n", (double)scale);
	}
	free(h);
	return 0;
}
