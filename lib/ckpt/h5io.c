/*
 * h5io.c - HDF5 helpers for the checkpoint layer, see h5io.h.
 */
#include "ckpt/h5io.h"

#include "base/error.h"
#include "base/xalloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "lib/ckpt stores little-endian data straight from memory");

/* The first non-empty description on HDF5's error stack, walking from the
 * innermost function (where the problem was found) outwards: that one says
 * "truncated file: eof = ..." where the outer ones say "unable to open file". */
struct h5io_reason {
	char text[512];
};

static herr_t take_innermost(unsigned n, const H5E_error2_t *e, void *data)
{
	struct h5io_reason *r = data;
	(void)n;
	if (!e->desc || !*e->desc)
		return 0;
	/* A failed system call comes as "file write failed: time = ..., filename
	 * = ..., errno = 27, error message = 'File too large', buf = ...": keep
	 * the first words and the system's message. */
	const char *msg = strstr(e->desc, "error message = '");
	if (msg) {
		msg += strlen("error message = '");
		size_t head = strcspn(e->desc, ":"), len = strcspn(msg, "'");
		/* a longer reason is cut at the buffer's end, on purpose */
		if (snprintf(r->text, sizeof(r->text), "%.*s: %.*s", (int)head, e->desc, (int)len, msg) < 0)
			r->text[0] = 0;
	} else {
		snprintf(r->text, sizeof(r->text), "%s", e->desc);
	}
	for (char *c = r->text; *c; c++) /* one line */
		if (*c == '\n')
			*c = ' ';
	return 1; /* stop the walk */
}

int h5io_fail(const char *src, int line, const char *call, const char *fmt, ...)
{
	struct h5io_reason reason = { "" };
	H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, take_innermost, &reason);
	H5Eclear2(H5E_DEFAULT);

	if (!fmt) /* (also tells GCC's format checks under the sanitizers so) */
		BUG("h5io_fail without a message");
	va_list ap, ap2;
	va_start(ap, fmt);
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	char *what = xmalloc(n > 0 ? (size_t)n + 1 : 1);
	vsnprintf(what, n > 0 ? (size_t)n + 1 : 1, fmt, ap2);
	va_end(ap2);

	/* "H5Dcreate2(f, name, ...)" -> "H5Dcreate2" */
	size_t fn = strcspn(call, "( ");
	error("%s: %s [%.*s at %s:%d]", what, reason.text[0] ? reason.text : "HDF5 gave no reason",
	      (int)fn, call, src, line);
	free(what);
	return -1;
}

void h5io_init(void)
{
	/* No library clean-up at exit: after a failed write (disk full, file
	 * size limit) HDF5 cannot close the file, and its exit handler then
	 * crashes trying again (signal 11 instead of our exit status 128).
	 * Every file megac writes is closed and fsynced explicitly before it
	 * counts, so there is nothing for that handler to save. Must come
	 * before any other HDF5 call. */
	H5dont_atexit();
	/* HDF5 would print its whole error stack to stderr on every failed
	 * call, including the ones we expect (probing for a name); our
	 * messages replace it. */
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void h5io_close_quiet(hid_t id)
{
	if (id < 0 || H5Iis_valid(id) <= 0)
		return;
	switch (H5Iget_type(id)) {
	case H5I_FILE: H5Fclose(id); break;
	case H5I_GROUP: H5Gclose(id); break;
	case H5I_DATASET: H5Dclose(id); break;
	case H5I_DATASPACE: H5Sclose(id); break;
	case H5I_DATATYPE: H5Tclose(id); break;
	case H5I_ATTR: H5Aclose(id); break;
	case H5I_GENPROP_LST: H5Pclose(id); break;
	default: H5Idec_ref(id); break;
	}
	H5Eclear2(H5E_DEFAULT);
}

hid_t h5io_fapl(const char *display, int writing)
{
	hid_t p;
	if (H5IO_SET(p, H5Pcreate(H5P_FILE_ACCESS), "cannot set up access to '%s'", display))
		return -1;
	/* Strong close: H5Fclose really closes the file even if we leaked an
	 * object handle on an error path, so the fsync that follows sees
	 * everything written. */
	if (H5IO_OK(H5Pset_fclose_degree(p, H5F_CLOSE_STRONG), "cannot set up access to '%s'", display))
		goto fail;
	/* Write the HDF5 1.8 file format, not the 1.0 one HDF5 picks by
	 * default: its object headers, B-trees and heaps carry checksums, so
	 * damaged metadata is an error instead of garbage or a crash, and
	 * attributes over 64 KiB are possible. Every HDF5 since 1.8 (2008)
	 * and every h5py reads it. */
	if (writing && H5IO_OK(H5Pset_libver_bounds(p, H5F_LIBVER_V18, H5F_LIBVER_V18),
			       "cannot set up access to '%s'", display))
		goto fail;
#if H5_VERSION_GE(1, 12, 1) || (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7)
	/* The programmatic form of HDF5_USE_FILE_LOCKING=FALSE. */
	if (H5IO_OK(H5Pset_file_locking(p, 0, 1), "cannot set up access to '%s'", display))
		goto fail;
#endif
	return p;
fail:
	H5Pclose(p);
	return -1;
}

hid_t h5io_fcpl(const char *display)
{
	hid_t p;
	if (H5IO_SET(p, H5Pcreate(H5P_FILE_CREATE), "cannot set up creation of '%s'", display))
		return -1;
	/* The root group's object header would otherwise carry times. */
	if (H5IO_OK(H5Pset_obj_track_times(p, 0), "cannot set up creation of '%s'", display)) {
		H5Pclose(p);
		return -1;
	}
	return p;
}

hid_t h5io_dcpl(const char *display)
{
	hid_t p;
	if (H5IO_SET(p, H5Pcreate(H5P_DATASET_CREATE), "cannot set up a dataset in '%s'", display))
		return -1;
	if (H5IO_OK(H5Pset_obj_track_times(p, 0), "cannot set up a dataset in '%s'", display)) {
		H5Pclose(p);
		return -1;
	}
	return p;
}

/* ---- paths --------------------------------------------------------------- */

int h5io_valid_path(const char *path)
{
	if (!path || !*path || *path == '/')
		return 0;
	const char *p = path;
	for (;;) {
		size_t n = strcspn(p, "/");
		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return 0;
		if (!p[n])
			return 1;
		p += n + 1;
	}
}

/* The kind of object at path (which must exist), or H5I_BADID after error(). */
static H5I_type_t object_kind(hid_t loc, const char *path, const char *display)
{
	hid_t o;
	if (H5IO_SET(o, H5Oopen(loc, path, H5P_DEFAULT), "cannot open '%s' in '%s'", path, display))
		return H5I_BADID;
	H5I_type_t t = H5Iget_type(o);
	H5Oclose(o);
	return t;
}

int h5io_exists(hid_t loc, const char *path, H5I_type_t type, const char *display)
{
	char *p = xstrdup(path);
	int r = 1;
	/* H5Lexists fails rather than answering "no" when a parent group is
	 * missing, so walk the components. */
	for (char *slash = p;; slash++) {
		slash = strchr(slash, '/');
		if (slash)
			*slash = 0;
		htri_t ex;
		if (H5IO_SET(ex, H5Lexists(loc, p, H5P_DEFAULT), "cannot look up '%s' in '%s'", p, display)) {
			r = -1;
			break;
		}
		if (!ex) {
			r = 0;
			break;
		}
		H5I_type_t want = slash ? H5I_GROUP : type;
		H5I_type_t got = object_kind(loc, p, display);
		if (got == H5I_BADID) {
			r = -1;
			break;
		}
		if (want != H5I_BADID && got != want) {
			r = 0;
			break;
		}
		if (!slash)
			break;
		*slash = '/';
	}
	free(p);
	return r;
}

int h5io_link_exists(hid_t loc, const char *path, const char *display)
{
	const char *last = strrchr(path, '/');
	if (last) {
		char *parent = xstrndup(path, (size_t)(last - path));
		int ex = h5io_exists(loc, parent, H5I_GROUP, display);
		free(parent);
		if (ex <= 0)
			return ex;
	}
	htri_t ex;
	if (H5IO_SET(ex, H5Lexists(loc, path, H5P_DEFAULT), "cannot look up '%s' in '%s'", path, display))
		return -1;
	return ex > 0;
}

int h5io_external_link(hid_t loc, const char *path, char **file, char **obj, const char *display)
{
	*file = *obj = NULL;
	int ex = h5io_link_exists(loc, path, display);
	if (ex <= 0)
		return ex;
	/* H5L_info_t and H5Lget_info are the 1.10 names; HDF5 1.12 maps them
	 * to H5L_info2_t and H5Lget_info2, with the same fields used here. */
	H5L_info_t info;
	if (H5IO_OK(H5Lget_info(loc, path, &info, H5P_DEFAULT), "cannot look up '%s' in '%s'", path, display))
		return -1;
	if (info.type != H5L_TYPE_EXTERNAL)
		return 0;
	size_t n = info.u.val_size;
	char *buf = xmalloc(n ? n : 1);
	unsigned flags;
	const char *f = NULL, *o = NULL;
	if (H5IO_OK(H5Lget_val(loc, path, buf, n, H5P_DEFAULT), "cannot read link '%s' in '%s'", path, display) ||
	    H5IO_OK(H5Lunpack_elink_val(buf, n, &flags, &f, &o), "cannot read link '%s' in '%s'", path, display)) {
		free(buf);
		return -1;
	}
	*file = xstrdup(f ? f : "");
	*obj = xstrdup(o ? o : "");
	free(buf);
	return 1;
}

struct list_ctx {
	char **names;
	size_t n, cap;
	const char *prefix;
	const char *display;
	int failed;
};

static herr_t list_one(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
	struct list_ctx *c = data;
	size_t lp = strlen(c->prefix);
	char *path = xmalloc(lp + strlen(name) + 2);
	sprintf(path, "%s%s%s", c->prefix, lp ? "/" : "", name);
	int add = info->type == H5L_TYPE_EXTERNAL;
	if (info->type == H5L_TYPE_HARD) {
		H5O_info_t oi;
		/* H5Oget_info_by_name: the 1.10 name (1.12 maps it, fields unchanged) */
		if (H5IO_OK(H5Oget_info_by_name(g, name, &oi, H5P_DEFAULT), "cannot look up '%s' in '%s'", path,
			    c->display)) {
			c->failed = 1;
			free(path);
			return -1;
		}
		if (oi.type == H5O_TYPE_DATASET) {
			add = 1;
		} else if (oi.type == H5O_TYPE_GROUP) {
			struct list_ctx sub = *c;
			sub.prefix = path;
			hsize_t idx = 0;
			herr_t rc = H5Literate_by_name(g, name, H5_INDEX_NAME, H5_ITER_INC, &idx, list_one, &sub,
						       H5P_DEFAULT);
			c->names = sub.names, c->n = sub.n, c->cap = sub.cap;
			if (rc < 0 || sub.failed) {
				if (!sub.failed)
					error("cannot list group '%s' of '%s'", path, c->display);
				c->failed = 1;
				free(path);
				return -1;
			}
		}
	}
	if (!add) {
		free(path);
		return 0;
	}
	if (c->n == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 64;
		c->names = xrealloc(c->names, c->cap * sizeof(*c->names));
	}
	c->names[c->n++] = path;
	return 0;
}

int h5io_list_tensors(hid_t loc, char ***names, size_t *n, const char *display)
{
	struct list_ctx c = { NULL, 0, 0, "", display, 0 };
	hsize_t idx = 0;
	herr_t rc = H5Literate(loc, H5_INDEX_NAME, H5_ITER_INC, &idx, list_one, &c);
	if (rc < 0 || c.failed) {
		if (!c.failed)
			error("cannot list the tensors of '%s'", display);
		for (size_t i = 0; i < c.n; i++)
			free(c.names[i]);
		free(c.names);
		return -1;
	}
	*names = c.names;
	*n = c.n;
	return 0;
}

struct attr_ctx {
	char **names;
	char *kinds;
	size_t n, cap;
};

static herr_t attr_one(hid_t loc, const char *name, const H5A_info_t *info, void *data)
{
	(void)info;
	struct attr_ctx *c = data;
	char kind = '?';
	hid_t at = H5Aopen(loc, name, H5P_DEFAULT);
	if (at >= 0) {
		hid_t ty = H5Aget_type(at);
		if (ty >= 0) {
			H5T_class_t cl = H5Tget_class(ty);
			kind = cl == H5T_INTEGER ? 'i' : cl == H5T_FLOAT ? 'f' : cl == H5T_STRING ? 's' : '?';
			H5Tclose(ty);
		}
		H5Aclose(at);
	}
	if (c->n == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 32;
		c->names = xrealloc(c->names, c->cap * sizeof(*c->names));
		c->kinds = xrealloc(c->kinds, c->cap);
	}
	c->names[c->n] = xstrdup(name);
	c->kinds[c->n++] = kind;
	return 0;
}

int h5io_list_attrs(hid_t loc, char ***names, char **kinds, size_t *n, const char *display)
{
	struct attr_ctx c = { NULL, NULL, 0, 0 };
	hsize_t idx = 0;
	if (H5Aiterate2(loc, H5_INDEX_NAME, H5_ITER_INC, &idx, attr_one, &c) < 0) {
		for (size_t i = 0; i < c.n; i++)
			free(c.names[i]);
		free(c.names);
		free(c.kinds);
		return error("cannot list the attributes of '%s'", display);
	}
	*names = c.names;
	*kinds = c.kinds;
	*n = c.n;
	return 0;
}

int h5io_make_parents(hid_t loc, const char *path, const char *display)
{
	const char *last = strrchr(path, '/');
	if (!last)
		return 0;
	char *p = xstrndup(path, (size_t)(last - path));
	hid_t gcpl = -1;
	int r = -1;
	if (H5IO_SET(gcpl, H5Pcreate(H5P_GROUP_CREATE), "cannot set up groups in '%s'", display) ||
	    H5IO_OK(H5Pset_obj_track_times(gcpl, 0), "cannot set up groups in '%s'", display))
		goto out;
	for (char *slash = p;; slash++) {
		slash = strchr(slash, '/');
		if (slash)
			*slash = 0;
		htri_t ex;
		if (H5IO_SET(ex, H5Lexists(loc, p, H5P_DEFAULT), "cannot look up '%s' in '%s'", p, display))
			goto out;
		if (ex) {
			H5I_type_t t = object_kind(loc, p, display);
			if (t == H5I_BADID)
				goto out;
			if (t != H5I_GROUP) {
				error("'%s': cannot create '%s': '%s' exists and is not a group", display, path, p);
				goto out;
			}
		} else {
			hid_t g;
			if (H5IO_SET(g, H5Gcreate2(loc, p, H5P_DEFAULT, gcpl, H5P_DEFAULT),
				     "cannot create group '%s' in '%s'", p, display))
				goto out;
			H5Gclose(g);
		}
		if (!slash)
			break;
		*slash = '/';
	}
	r = 0;
out:
	if (gcpl >= 0)
		H5Pclose(gcpl);
	free(p);
	return r;
}

/* ---- attributes ----------------------------------------------------------- */

/* How an object is named in messages: the root group is "/". */
static const char *objname(const char *obj)
{
	return !strcmp(obj, ".") ? "/" : obj;
}

/* An attribute of n values (n 0: a scalar) of file type ftype from buf
 * (memory type mtype); refuses one that is already set. */
static int put_attr_n(hid_t loc, const char *obj, const char *name, hid_t ftype, hid_t mtype, const void *buf,
		      size_t n, const char *display)
{
	htri_t ex;
	if (H5IO_SET(ex, H5Aexists_by_name(loc, obj, name, H5P_DEFAULT),
		     "cannot look up attribute '%s' of '%s' in '%s'", name, objname(obj), display))
		return -1;
	if (ex)
		return error("'%s': attribute '%s' of '%s' is already set", display, name, objname(obj));
	hsize_t dims[1] = { (hsize_t)n };
	hid_t space = -1, attr = -1;
	int r = -1;
	if (H5IO_SET(space, n ? H5Screate_simple(1, dims, NULL) : H5Screate(H5S_SCALAR),
		     "cannot write attribute '%s' in '%s'", name, display) ||
	    H5IO_SET(attr, H5Acreate_by_name(loc, obj, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
		     "cannot create attribute '%s' of '%s' in '%s'", name, objname(obj), display) ||
	    H5IO_OK(H5Awrite(attr, mtype, buf), "cannot write attribute '%s' of '%s' in '%s'", name,
		    objname(obj), display))
		goto out;
	r = 0;
out:
	if (attr >= 0 && H5IO_OK(H5Aclose(attr), "cannot write attribute '%s' of '%s' in '%s'", name,
				 objname(obj), display))
		r = -1;
	if (space >= 0)
		H5Sclose(space);
	return r;
}

static int put_attr(hid_t loc, const char *obj, const char *name, hid_t ftype, hid_t mtype, const void *buf,
		    const char *display)
{
	return put_attr_n(loc, obj, name, ftype, mtype, buf, 0, display);
}

int h5io_put_i64(hid_t loc, const char *obj, const char *name, int64_t v, const char *display)
{
	return put_attr(loc, obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, display);
}

int h5io_put_u32(hid_t loc, const char *obj, const char *name, uint32_t v, const char *display)
{
	return put_attr(loc, obj, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, &v, display);
}

int h5io_put_f64(hid_t loc, const char *obj, const char *name, double v, const char *display)
{
	return put_attr(loc, obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v, display);
}

/* A fixed-length UTF-8 string type of n bytes (n >= 1), NUL-padded as
 * h5py and numpy pad. Not variable-length strings: their bytes would live
 * in the file's global heap, which has no checksum, and HDF5 1.10 crashes
 * reading a damaged one; a fixed-length value sits in the (checksummed)
 * object header, or in dense attribute storage when it is over 64 KiB. */
static hid_t fixed_str_type(size_t n, const char *display)
{
	hid_t t;
	if (H5IO_SET(t, H5Tcopy(H5T_C_S1), "cannot make a string type for '%s'", display))
		return -1;
	if (H5IO_OK(H5Tset_size(t, n), "cannot make a string type for '%s'", display) ||
	    H5IO_OK(H5Tset_strpad(t, H5T_STR_NULLPAD), "cannot make a string type for '%s'", display) ||
	    H5IO_OK(H5Tset_cset(t, H5T_CSET_UTF8), "cannot make a string type for '%s'", display)) {
		H5Tclose(t);
		return -1;
	}
	return t;
}

int h5io_put_str(hid_t loc, const char *obj, const char *name, const char *v, const char *display)
{
	/* HDF5 has no zero-size type: "" is one NUL byte, which reads back as "". */
	size_t n = strlen(v);
	hid_t t = fixed_str_type(n ? n : 1, display);
	if (t < 0)
		return -1;
	int r = put_attr(loc, obj, name, t, t, n ? v : "", display);
	H5Tclose(t);
	return r;
}

int h5io_has_attr(hid_t loc, const char *obj, const char *name, const char *display)
{
	htri_t ex;
	if (H5IO_SET(ex, H5Aexists_by_name(loc, obj, name, H5P_DEFAULT),
		     "cannot look up attribute '%s' of '%s' in '%s'", name, objname(obj), display))
		return -1;
	return ex > 0;
}

/* An open scalar attribute and its type, or -1 after error(). */
static hid_t open_scalar_attr(hid_t loc, const char *obj, const char *name, hid_t *type, const char *display)
{
	int ex = h5io_has_attr(loc, obj, name, display);
	if (ex <= 0) {
		if (ex == 0)
			error("'%s': no attribute '%s' on '%s'", display, name, objname(obj));
		return -1;
	}
	hid_t attr, space = -1;
	if (H5IO_SET(attr, H5Aopen_by_name(loc, obj, name, H5P_DEFAULT, H5P_DEFAULT),
		     "cannot open attribute '%s' of '%s' in '%s'", name, objname(obj), display))
		return -1;
	hssize_t npoints;
	if (H5IO_SET(space, H5Aget_space(attr), "cannot read attribute '%s' of '%s' in '%s'", name,
		     objname(obj), display) ||
	    H5IO_SET(npoints, H5Sget_simple_extent_npoints(space), "cannot read attribute '%s' of '%s' in '%s'",
		     name, objname(obj), display) ||
	    H5IO_SET(*type, H5Aget_type(attr), "cannot read attribute '%s' of '%s' in '%s'", name,
		     objname(obj), display))
		goto fail;
	H5Sclose(space);
	if (npoints != 1) {
		H5Tclose(*type);
		error("'%s': attribute '%s' of '%s' holds %lld values, expected one", display, name,
		      objname(obj), (long long)npoints);
		H5Aclose(attr);
		return -1;
	}
	return attr;
fail:
	if (space >= 0)
		H5Sclose(space);
	H5Aclose(attr);
	return -1;
}

static int wrong_type(hid_t type, const char *obj, const char *name, const char *want, const char *display)
{
	char buf[64];
	return error("'%s': attribute '%s' of '%s' is %s, expected %s", display, name, objname(obj),
		     h5io_type_name(type, buf, sizeof(buf)), want);
}

/* Any integer attribute, range checked against [lo, hi]. */
static int get_int(hid_t loc, const char *obj, const char *name, int64_t lo, uint64_t hi, int64_t *v,
		   const char *display)
{
	hid_t type, attr = open_scalar_attr(loc, obj, name, &type, display);
	if (attr < 0)
		return -1;
	int r = -1;
	if (H5Tget_class(type) != H5T_INTEGER) {
		wrong_type(type, obj, name, "an integer", display);
		goto out;
	}
	int is_signed = H5Tget_sign(type) == H5T_SGN_2;
	int64_t s = 0;
	uint64_t u = 0;
	/* Read in the widest type of the same signedness, so HDF5's conversion
	 * (which clips silently) never has to clip. */
	if (H5IO_OK(H5Aread(attr, is_signed ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64, is_signed ? (void *)&s : (void *)&u),
		    "cannot read attribute '%s' of '%s' in '%s'", name, objname(obj), display))
		goto out;
	if (is_signed ? (s < lo || (s >= 0 && (uint64_t)s > hi)) : u > hi) {
		if (is_signed)
			error("'%s': attribute '%s' of '%s' is %lld, out of range", display, name, objname(obj),
			      (long long)s);
		else
			error("'%s': attribute '%s' of '%s' is %llu, out of range", display, name, objname(obj),
			      (unsigned long long)u);
		goto out;
	}
	*v = is_signed ? s : (int64_t)u;
	r = 0;
out:
	H5Tclose(type);
	H5Aclose(attr);
	return r;
}

int h5io_get_i64(hid_t loc, const char *obj, const char *name, int64_t *v, const char *display)
{
	return get_int(loc, obj, name, INT64_MIN, INT64_MAX, v, display);
}

int h5io_get_u32(hid_t loc, const char *obj, const char *name, uint32_t *v, const char *display)
{
	int64_t x;
	if (get_int(loc, obj, name, 0, UINT32_MAX, &x, display) < 0)
		return -1;
	*v = (uint32_t)x;
	return 0;
}

int h5io_get_f64(hid_t loc, const char *obj, const char *name, double *v, const char *display)
{
	hid_t type, attr = open_scalar_attr(loc, obj, name, &type, display);
	if (attr < 0)
		return -1;
	int r = -1;
	if (H5Tget_class(type) != H5T_FLOAT)
		wrong_type(type, obj, name, "a floating-point number", display);
	else if (!H5IO_OK(H5Aread(attr, H5T_NATIVE_DOUBLE, v), "cannot read attribute '%s' of '%s' in '%s'",
			  name, objname(obj), display))
		r = 0;
	H5Tclose(type);
	H5Aclose(attr);
	return r;
}

int h5io_get_str(hid_t loc, const char *obj, const char *name, char **out, const char *display)
{
	hid_t type, mtype = -1, attr = open_scalar_attr(loc, obj, name, &type, display);
	if (attr < 0)
		return -1;
	int r = -1;
	htri_t vl;
	if (H5Tget_class(type) != H5T_STRING) {
		wrong_type(type, obj, name, "a string", display);
		goto out;
	}
	if (H5IO_SET(vl, H5Tis_variable_str(type), "cannot read attribute '%s' of '%s' in '%s'", name,
		     objname(obj), display))
		goto out;
	if (vl) {
		/* Only in files written by other tools (h5py's default for str). */
		char *p = NULL;
		if (H5IO_SET(mtype, H5Tcopy(H5T_C_S1), "cannot read attribute '%s' of '%s' in '%s'", name,
			     objname(obj), display) ||
		    H5IO_OK(H5Tset_size(mtype, H5T_VARIABLE), "cannot read attribute '%s' of '%s' in '%s'", name,
			    objname(obj), display) ||
		    H5IO_OK(H5Tset_cset(mtype, H5Tget_cset(type)), "cannot read attribute '%s' of '%s' in '%s'",
			    name, objname(obj), display) ||
		    H5IO_OK(H5Aread(attr, mtype, &p), "cannot read attribute '%s' of '%s' in '%s'", name,
			    objname(obj), display))
			goto out;
		*out = xstrdup(p ? p : "");
		H5free_memory(p);
	} else {
		/* Fixed-length (h5py writes these for numpy byte strings): read
		 * into a buffer one longer than the type and stop at the first
		 * NUL whatever the padding convention. */
		size_t n = H5Tget_size(type);
		char *buf = xcalloc(n + 1, 1);
		if (H5IO_OK(H5Aread(attr, type, buf), "cannot read attribute '%s' of '%s' in '%s'", name,
			    objname(obj), display)) {
			free(buf);
			goto out;
		}
		if (H5Tget_strpad(type) == H5T_STR_SPACEPAD)
			while (n > 0 && buf[n - 1] == ' ')
				buf[--n] = 0;
		*out = buf;
	}
	r = 0;
out:
	if (mtype >= 0)
		H5Tclose(mtype);
	H5Tclose(type);
	H5Aclose(attr);
	return r;
}

const char *h5io_type_name(hid_t type, char *buf, size_t n)
{
	size_t bits = H5Tget_size(type) * 8;
	const char *be = H5Tget_order(type) == H5T_ORDER_BE ? " big-endian" : "";
	switch (H5Tget_class(type)) {
	case H5T_INTEGER:
		snprintf(buf, n, "%s%zu%s", H5Tget_sign(type) == H5T_SGN_2 ? "int" : "uint", bits, be);
		break;
	case H5T_FLOAT: snprintf(buf, n, "float%zu%s", bits, be); break;
	case H5T_STRING: snprintf(buf, n, "a string"); break;
	case H5T_COMPOUND: snprintf(buf, n, "a compound type"); break;
	case H5T_ENUM: snprintf(buf, n, "an enum"); break;
	case H5T_ARRAY: snprintf(buf, n, "an array type"); break;
	case H5T_VLEN: snprintf(buf, n, "a variable-length type"); break;
	case H5T_OPAQUE: snprintf(buf, n, "opaque data"); break;
	case H5T_BITFIELD: snprintf(buf, n, "a bitfield"); break;
	case H5T_REFERENCE: snprintf(buf, n, "a reference"); break;
	default: snprintf(buf, n, "an unknown type"); break;
	}
	H5Eclear2(H5E_DEFAULT);
	return buf;
}

/* ---- CRC-32 ------------------------------------------------------------- */

void h5io_crc32_init(struct h5io_crc32 *c)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t crc = i;
		for (int k = 0; k < 8; k++)
			crc = crc & 1 ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
		c->t[0][i] = crc;
	}
	/* t[k][b]: the CRC contribution of byte b followed by k zero bytes. */
	for (int k = 1; k < 8; k++)
		for (int i = 0; i < 256; i++)
			c->t[k][i] = (c->t[k - 1][i] >> 8) ^ c->t[0][c->t[k - 1][i] & 0xff];
}

uint32_t h5io_crc32(const struct h5io_crc32 *c, uint32_t crc, const void *buf, size_t n)
{
	const unsigned char *p = buf;
	crc = ~crc;
	while (n >= 8) {
		uint64_t v;
		memcpy(&v, p, 8); /* little-endian: byte 0 is the low byte */
		v ^= crc;
		crc = c->t[7][v & 0xff] ^ c->t[6][(v >> 8) & 0xff] ^ c->t[5][(v >> 16) & 0xff] ^
		      c->t[4][(v >> 24) & 0xff] ^ c->t[3][(v >> 32) & 0xff] ^ c->t[2][(v >> 40) & 0xff] ^
		      c->t[1][(v >> 48) & 0xff] ^ c->t[0][v >> 56];
		p += 8;
		n -= 8;
	}
	while (n--)
		crc = c->t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

int h5io_put_u32_array(hid_t loc, const char *obj, const char *name, const uint32_t *v, size_t n,
		       const char *display)
{
	if (!n)
		BUG("an empty attribute array '%s' in '%s'", name, display);
	return put_attr_n(loc, obj, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, v, n, display);
}

int h5io_get_u32_array(hid_t loc, const char *obj, const char *name, uint32_t *v, size_t n,
		       const char *display)
{
	hid_t attr, space = -1, type = -1;
	if (H5IO_SET(attr, H5Aopen_by_name(loc, obj, name, H5P_DEFAULT, H5P_DEFAULT),
		     "cannot open attribute '%s' of '%s' in '%s'", name, objname(obj), display))
		return -1;
	int r = -1;
	hssize_t npoints;
	if (H5IO_SET(space, H5Aget_space(attr), "cannot read attribute '%s' of '%s' in '%s'", name, objname(obj),
		     display) ||
	    H5IO_SET(npoints, H5Sget_simple_extent_npoints(space), "cannot read attribute '%s' of '%s' in '%s'",
		     name, objname(obj), display) ||
	    H5IO_SET(type, H5Aget_type(attr), "cannot read attribute '%s' of '%s' in '%s'", name, objname(obj),
		     display))
		goto out;
	if ((size_t)npoints != n) {
		error("'%s': attribute '%s' of '%s' holds %lld values, expected %zu", display, name, objname(obj),
		      (long long)npoints, n);
		goto out;
	}
	if (H5Tget_class(type) != H5T_INTEGER || H5Tget_size(type) != 4 || H5Tget_sign(type) != H5T_SGN_NONE) {
		wrong_type(type, obj, name, "uint32 values", display);
		goto out;
	}
	if (H5IO_OK(H5Aread(attr, H5T_NATIVE_UINT32, v), "cannot read attribute '%s' of '%s' in '%s'", name,
		    objname(obj), display))
		goto out;
	r = 0;
out:
	if (type >= 0)
		H5Tclose(type);
	if (space >= 0)
		H5Sclose(space);
	H5Aclose(attr);
	return r;
}
