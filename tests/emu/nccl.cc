/*
 * nccl.cc - the emulated device's NCCL (cuda/nccl.h), over MPI between the
 * processes of the job: each process is one emulated GPU, each
 * communicator an MPI communicator of its ranks (made with
 * MPI_Comm_create_group from the ranks that join its unique id), each NCCL
 * call an item on its CUDA stream (device.h) that posts nonblocking MPI
 * operations when it reaches the stream's head and completes when they do.
 *
 * NCCL's behaviour that megac's deadlock arguments rest on, modelled:
 *  1. The operations of one communicator run one after the other, whatever
 *     streams they were queued on: a group call starts only once the
 *     communicator's previous one has completed.
 *  2. A send completes only when the peer's matching receive has taken the
 *     data (MPI_Issend), and between two ranks sends and receives match in
 *     the order posted, not by tag.
 *  3. Point-to-point connections are made at a channel's first use: the
 *     first send to a peer (first receive from it) on a communicator blocks
 *     the host, at the call or at ncclGroupEnd, until that peer has posted
 *     its first receive from (send to) this rank. A program that has every
 *     rank first post a receive on a fresh channel and then a send waits
 *     forever, as it would on GPUs; here it is reported after
 *     MEGAC_EMU_TIMEOUT seconds, naming the channel.
 *  4. ncclCommDestroy waits for the communicator's other ranks to destroy it
 *     too (its finalisation is collective), so ranks that destroy shared
 *     communicators in different orders wait for each other: reported the
 *     same way (NCCL 2.23 and later require one order on all ranks).
 *  5. Two ranks of one communicator on one GPU are refused (ncclInvalidUsage,
 *     as NCCL's "Duplicate GPU detected"); buffers must be device memory of
 *     the communicator's device.
 * Reductions are MPI's (the order of a sum differs from NCCL's rings and
 * trees; results are the same on every rank, as with NCCL).
 */
#include "device.h"

#include <nccl.h>

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace {

/* MPI_COMM_WORLD tags of the communicator set-up (join, then the member list) */
const int TAG_JOIN = 31000, TAG_JOIN_SPAN = 900;
/* tags on a communicator's own MPI communicator */
const int TAG_DATA = 1, TAG_CONN_SEND = 2, TAG_CONN_RECV = 3;
const uint64_t ID_MAGIC = 0x6d656761632d6e63ull;

struct id_body {
	uint64_t magic;
	int creator; /* world rank */
	int counter;
};

struct join_msg {
	int rank, world, dev, counter;
};

enum op_kind { OP_SEND, OP_RECV, OP_ALLREDUCE, OP_BCAST, OP_REDUCE, OP_ALLGATHER, OP_REDUCESCATTER };
const char *const op_names[] = { "ncclSend", "ncclRecv", "ncclAllReduce", "ncclBroadcast", "ncclReduce",
				 "ncclAllGather", "ncclReduceScatter" };

struct op {
	op_kind kind;
	const void *send;
	void *recv;
	size_t count;
	ncclDataType_t type;
	ncclRedOp_t red;
	int root, peer;
	ncclComm_t comm;
	cudaStream_t stream;
};

/* one group call (or one call outside a group): started and completed as a whole */
struct group {
	std::vector<op> ops;
	std::vector<MPI_Request> reqs;
	std::vector<std::shared_ptr<std::vector<unsigned char>>> temps; /* reduce-scatter in place */
	std::vector<uint64_t> seqs; /* per op: its communicator's sequence number of this group */
	bool started, done;
};

int id_counter, comm_counter, group_depth, in_flight;
std::vector<op> pending; /* the open group's operations */
std::string last_error;

} // namespace

struct ncclComm {
	int rank, nranks, dev, index;
	std::vector<int> world; /* the world rank of each rank */
	MPI_Comm mpi;
	std::set<int> sent_to, recv_from; /* connected peers */
	uint64_t issued, completed;       /* group calls */
	bool destroyed;
};

namespace {

ncclResult_t fail(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ncclResult_t fail(ncclResult_t r, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	last_error = buf;
	fprintf(stderr, "emu: NCCL: %s\n", buf);
	return r;
}

using emu::now;

bool mpi_up(void)
{
	int world, rank;
	return emu::mpi_running(&world, &rank);
}

size_t type_size(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8: case ncclUint8: return 1;
	case ncclFloat16: case ncclBfloat16: return 2;
	case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
	case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
	default: return 0;
	}
}

MPI_Datatype mpi_type(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8: return MPI_SIGNED_CHAR;
	case ncclUint8: return MPI_UNSIGNED_CHAR;
	case ncclInt32: return MPI_INT32_T;
	case ncclUint32: return MPI_UINT32_T;
	case ncclInt64: return MPI_INT64_T;
	case ncclUint64: return MPI_UINT64_T;
	case ncclFloat32: return MPI_FLOAT;
	case ncclFloat64: return MPI_DOUBLE;
	default: return MPI_DATATYPE_NULL; /* halves: moved as bytes, never reduced here */
	}
}

MPI_Op mpi_op(ncclRedOp_t r)
{
	switch (r) {
	case ncclProd: return MPI_PROD;
	case ncclMax: return MPI_MAX;
	case ncclMin: return MPI_MIN;
	default: return MPI_SUM; /* sum, and avg (divided after) */
	}
}

/* waits on MPI requests with the emulator's deadlock timeout; what says what waits */
void wait_reqs(std::vector<MPI_Request> &reqs, const std::string &what)
{
	const double t0 = now();
	for (long spins = 0;; spins++) {
		int flag = 0;
		MPI_Testall((int)reqs.size(), reqs.data(), &flag, MPI_STATUSES_IGNORE);
		if (flag)
			return;
		if (now() - t0 > emu::timeout())
			emu::fatal("%s. It has waited %.0f s: a deadlock (the peer never posts its side, or waits for "
				   "this rank elsewhere); MEGAC_EMU_TIMEOUT sets the seconds",
				   what.c_str(), now() - t0);
		if (spins > 1000)
			usleep(50);
	}
}

/* The connections a group's point-to-point operations make at their first
 * use: posted together, then waited for (model 3 above). */
void connect(const std::vector<op> &ops)
{
	std::vector<MPI_Request> reqs;
	std::vector<std::string> names;
	static int token_out = 1;
	static int token_in[4096];
	int ti = 0;
	for (const op &o : ops) {
		if ((o.kind != OP_SEND && o.kind != OP_RECV) || o.peer == o.comm->rank)
			continue;
		std::set<int> &done = o.kind == OP_SEND ? o.comm->sent_to : o.comm->recv_from;
		if (done.count(o.peer))
			continue;
		done.insert(o.peer);
		const int mine = o.kind == OP_SEND ? TAG_CONN_SEND : TAG_CONN_RECV;
		const int theirs = o.kind == OP_SEND ? TAG_CONN_RECV : TAG_CONN_SEND;
		MPI_Request r[2];
		MPI_Isend(&token_out, 1, MPI_INT, o.peer, mine, o.comm->mpi, &r[0]);
		MPI_Irecv(&token_in[ti++ % 4096], 1, MPI_INT, o.peer, theirs, o.comm->mpi, &r[1]);
		reqs.push_back(r[0]);
		reqs.push_back(r[1]);
		char b[320];
		const int pw = o.comm->world.empty() ? o.peer : o.comm->world[(size_t)o.peer];
		snprintf(b, sizeof b,
			 "%s %s rank %d (world rank %d) on communicator #%d (%d ranks) is the first on that channel, so "
			 "NCCL connects it and the host waits until world rank %d posts its first %s",
			 op_names[o.kind], o.kind == OP_SEND ? "to" : "from", o.peer, pw, o.comm->index, o.comm->nranks,
			 pw, o.kind == OP_SEND ? "receive from this rank" : "send to this rank");
		names.push_back(b);
	}
	if (reqs.empty())
		return;
	std::string what = names[0];
	if (names.size() > 1)
		what += " (and " + std::to_string(names.size() - 1) + " more connections of the group)";
	wait_reqs(reqs, what);
}

std::string group_what(const group &g)
{
	const op &o = g.ops[0];
	std::string s = std::string(op_names[o.kind]) + " on NCCL communicator #" + std::to_string(o.comm->index) + " (" +
			std::to_string(o.comm->nranks) + " ranks, this rank " + std::to_string(o.comm->rank) + ")";
	if (o.kind == OP_SEND || o.kind == OP_RECV)
		s += std::string(o.kind == OP_SEND ? " to" : " from") + " rank " + std::to_string(o.peer);
	if (g.ops.size() > 1)
		s += " and " + std::to_string(g.ops.size() - 1) + " more operations of its group";
	s += g.started ? ": started, waiting for its peers" : ": waiting for the communicator's previous operation";
	return s;
}

/* posts the group's MPI operations (its communicators' earlier groups have completed) */
void start(group &g)
{
	std::vector<op *> self_sends, self_recvs;
	for (op &o : g.ops) {
		const size_t es = type_size(o.type), bytes = o.count * es;
		ncclComm_t c = o.comm;
		MPI_Request r;
		if (c->nranks == 1) {
			switch (o.kind) {
			case OP_SEND: self_sends.push_back(&o); break;
			case OP_RECV: self_recvs.push_back(&o); break;
			default:
				if (o.recv && o.send != o.recv && bytes)
					memmove(o.recv, o.send, bytes);
			}
			continue;
		}
		const MPI_Datatype mt = mpi_type(o.type);
		switch (o.kind) {
		case OP_SEND:
			MPI_Issend(o.send, (int)bytes, MPI_BYTE, o.peer, TAG_DATA, c->mpi, &r);
			g.reqs.push_back(r);
			break;
		case OP_RECV:
			MPI_Irecv(o.recv, (int)bytes, MPI_BYTE, o.peer, TAG_DATA, c->mpi, &r);
			g.reqs.push_back(r);
			break;
		case OP_ALLREDUCE:
			MPI_Iallreduce(o.send == o.recv ? MPI_IN_PLACE : o.send, o.recv, (int)o.count, mt, mpi_op(o.red),
				       c->mpi, &r);
			g.reqs.push_back(r);
			break;
		case OP_BCAST:
			if (c->rank == o.root && o.send != o.recv)
				memmove(o.recv, o.send, bytes);
			MPI_Ibcast(o.recv, (int)bytes, MPI_BYTE, o.root, c->mpi, &r);
			g.reqs.push_back(r);
			break;
		case OP_REDUCE:
			MPI_Ireduce(c->rank == o.root && o.send == o.recv ? MPI_IN_PLACE : o.send, o.recv, (int)o.count, mt,
				    mpi_op(o.red), o.root, c->mpi, &r);
			g.reqs.push_back(r);
			break;
		case OP_ALLGATHER:
			MPI_Iallgather((const char *)o.recv + (size_t)c->rank * bytes == o.send ? MPI_IN_PLACE : o.send,
				       (int)o.count, mt, o.recv, (int)o.count, mt, c->mpi, &r);
			g.reqs.push_back(r);
			break;
		case OP_REDUCESCATTER: {
			/* NCCL's in place (recv = send + rank * count) is not MPI's: a temporary output */
			std::shared_ptr<std::vector<unsigned char>> t(new std::vector<unsigned char>(bytes ? bytes : 1));
			g.temps.push_back(t);
			MPI_Ireduce_scatter_block(o.send, t->data(), (int)o.count, mt, mpi_op(o.red), c->mpi, &r);
			g.reqs.push_back(r);
			break;
		}
		}
	}
	/* a one-rank communicator: its sends and receives to itself meet in order */
	if (self_sends.size() != self_recvs.size())
		emu::fatal("a group call on a one-rank NCCL communicator has %zu sends and %zu receives to itself: "
			   "they can never all complete",
			   self_sends.size(), self_recvs.size());
	for (size_t i = 0; i < self_sends.size(); i++) {
		const size_t sb = self_sends[i]->count * type_size(self_sends[i]->type);
		const size_t rb = self_recvs[i]->count * type_size(self_recvs[i]->type);
		if (sb != rb)
			emu::fatal("a send of %zu bytes to itself meets a receive of %zu bytes", sb, rb);
		if (sb)
			memmove(self_recvs[i]->recv, self_sends[i]->send, sb);
	}
	g.started = true;
}

void finish(group &g)
{
	size_t ti = 0;
	for (op &o : g.ops) {
		if (o.comm->nranks == 1)
			continue;
		const size_t bytes = o.count * type_size(o.type);
		if (o.kind == OP_REDUCESCATTER)
			memcpy(o.recv, g.temps[ti++]->data(), bytes);
		if (o.red == ncclAvg && (o.kind == OP_ALLREDUCE || o.kind == OP_REDUCESCATTER ||
					 (o.kind == OP_REDUCE && o.comm->rank == o.root))) {
			for (size_t i = 0; i < o.count; i++) {
				if (o.type == ncclFloat32)
					((float *)o.recv)[i] /= (float)o.comm->nranks;
				else if (o.type == ncclFloat64)
					((double *)o.recv)[i] /= (double)o.comm->nranks;
			}
		}
	}
}

/* a stream item's step: start when the communicators are free, complete with MPI */
bool step(group &g)
{
	if (g.done)
		return true;
	if (!g.started) {
		for (size_t i = 0; i < g.ops.size(); i++)
			if (g.ops[i].comm->completed + 1 < g.seqs[i])
				return false;
		start(g);
	}
	if (!g.reqs.empty()) {
		int flag = 0;
		MPI_Testall((int)g.reqs.size(), g.reqs.data(), &flag, MPI_STATUSES_IGNORE);
		if (!flag)
			return false;
	}
	finish(g);
	g.done = true;
	for (op &o : g.ops)
		if (o.comm->completed < g.seqs[&o - g.ops.data()])
			o.comm->completed = g.seqs[&o - g.ops.data()];
	in_flight--;
	return true;
}

/* ncclGroupEnd, or the end of a call outside a group */
ncclResult_t issue(std::vector<op> ops)
{
	if (ops.empty())
		return ncclSuccess;
	for (const op &o : ops)
		if (o.stream != ops[0].stream)
			return fail(ncclInvalidUsage, "a group with operations on different streams (the emulator takes one "
						      "stream per group)");
	connect(ops);
	std::shared_ptr<group> g(new group());
	g->ops = std::move(ops);
	std::set<ncclComm_t> bumped;
	for (op &o : g->ops) {
		if (!bumped.count(o.comm)) {
			o.comm->issued++;
			bumped.insert(o.comm);
		}
		g->seqs.push_back(o.comm->issued);
	}
	in_flight++;
	emu::enqueue(g->ops[0].stream, emu::ITEM_COMM, [g] { return step(*g); }, [g] { return group_what(*g); });
	return ncclSuccess;
}

ncclResult_t add(const op &o)
{
	emu::progress();
	ncclComm_t c = o.comm;
	if (!c || c->destroyed)
		return fail(ncclInvalidArgument, "%s on a %s communicator", op_names[o.kind], c ? "destroyed" : "NULL");
	if (emu::current_device() != c->dev)
		return fail(ncclInvalidUsage, "%s on communicator #%d of device %d while device %d is current",
			    op_names[o.kind], c->index, c->dev, emu::current_device());
	const size_t es = type_size(o.type);
	if (!es)
		return fail(ncclInvalidArgument, "%s: data type %d", op_names[o.kind], (int)o.type);
	if ((o.kind == OP_ALLREDUCE || o.kind == OP_REDUCE || o.kind == OP_REDUCESCATTER) &&
	    mpi_type(o.type) == MPI_DATATYPE_NULL)
		return fail(ncclInvalidArgument, "%s of 16-bit floats: the emulator reduces fp32, fp64 and integers",
			    op_names[o.kind]);
	if ((o.kind == OP_SEND || o.kind == OP_RECV) && (o.peer < 0 || o.peer >= c->nranks))
		return fail(ncclInvalidArgument, "%s with peer %d on a communicator of %d ranks", op_names[o.kind], o.peer,
			    c->nranks);
	if ((o.kind == OP_BCAST || o.kind == OP_REDUCE) && (o.root < 0 || o.root >= c->nranks))
		return fail(ncclInvalidArgument, "%s with root %d on a communicator of %d ranks", op_names[o.kind], o.root,
			    c->nranks);
	const size_t bytes = o.count * es;
	const size_t in = o.kind == OP_REDUCESCATTER ? bytes * (size_t)c->nranks : bytes;
	const size_t out = o.kind == OP_ALLGATHER ? bytes * (size_t)c->nranks : bytes;
	const bool reads = o.kind != OP_RECV && (o.kind != OP_BCAST || c->rank == o.root);
	const bool writes = o.kind != OP_SEND && (o.kind != OP_REDUCE || c->rank == o.root);
	if (bytes && reads)
		emu::need_device_range(o.send, in, op_names[o.kind], "its send buffer");
	if (bytes && writes)
		emu::need_device_range(o.recv, out, op_names[o.kind], "its receive buffer");
	if (group_depth > 0) {
		pending.push_back(o);
		return ncclSuccess;
	}
	return issue(std::vector<op>{ o });
}

op make(op_kind k, const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t red, int root, int peer,
	ncclComm_t comm, cudaStream_t s)
{
	op o;
	o.kind = k;
	o.send = send;
	o.recv = recv;
	o.count = count;
	o.type = t;
	o.red = red;
	o.root = root;
	o.peer = peer;
	o.comm = comm;
	o.stream = s;
	return o;
}

} // namespace

namespace emu {
int comm_in_flight(void)
{
	return in_flight;
}
} // namespace emu

extern "C" const char *ncclGetErrorString(ncclResult_t r)
{
	switch (r) {
	case ncclSuccess: return "no error";
	case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError: return "remote process exited or there was a network error";
	case ncclInProgress: return "NCCL operation in progress";
	default: return "unknown result code";
	}
}

extern "C" const char *ncclGetLastError(ncclComm_t comm)
{
	(void)comm;
	return last_error.c_str();
}

extern "C" ncclResult_t ncclGetVersion(int *version)
{
	*version = NCCL_VERSION_CODE;
	return ncclSuccess;
}

extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	memset(id, 0, sizeof *id);
	id_body b;
	b.magic = ID_MAGIC;
	b.creator = 0;
	if (mpi_up())
		MPI_Comm_rank(MPI_COMM_WORLD, &b.creator);
	b.counter = id_counter++;
	memcpy(id->internal, &b, sizeof b);
	return ncclSuccess;
}

extern "C" ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	emu::progress();
	*comm = NULL;
	id_body b;
	memcpy(&b, id.internal, sizeof b);
	if (b.magic != ID_MAGIC)
		return fail(ncclInvalidArgument, "ncclCommInitRank with an id ncclGetUniqueId did not make");
	if (nranks < 1 || rank < 0 || rank >= nranks)
		return fail(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", rank, nranks);
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) {
		cudaGetLastError();
		return fail(ncclUnhandledCudaError, "ncclCommInitRank without a CUDA device");
	}
	ncclComm_t c = new ncclComm();
	c->rank = rank;
	c->nranks = nranks;
	c->dev = emu::current_device();
	c->mpi = MPI_COMM_NULL;
	if (nranks > 1) {
		if (!mpi_up()) {
			delete c;
			return fail(ncclSystemError, "a communicator of %d ranks needs MPI (the emulator carries NCCL over it)",
				    nranks);
		}
		int world = 0;
		MPI_Comm_rank(MPI_COMM_WORLD, &world);
		const int tag = TAG_JOIN + b.counter % TAG_JOIN_SPAN;
		std::vector<join_msg> members((size_t)nranks);
		if (world == b.creator) {
			std::vector<int> seen((size_t)nranks, 0);
			members[(size_t)rank] = join_msg{ rank, world, c->dev, b.counter };
			seen[(size_t)rank] = 1;
			for (int i = 1; i < nranks; i++) {
				join_msg m;
				MPI_Recv(&m, (int)sizeof m, MPI_BYTE, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				if (m.rank < 0 || m.rank >= nranks || seen[(size_t)m.rank] || m.counter != b.counter)
					emu::fatal("ncclCommInitRank: world rank %d joins as rank %d of %d, which is taken or "
						   "out of range",
						   m.world, m.rank, nranks);
				seen[(size_t)m.rank] = 1;
				members[(size_t)m.rank] = m;
			}
			for (int i = 0; i < nranks; i++)
				if (i != rank)
					MPI_Send(members.data(), (int)(sizeof(join_msg) * members.size()), MPI_BYTE,
						 members[(size_t)i].world, tag, MPI_COMM_WORLD);
		} else {
			join_msg m{ rank, world, c->dev, b.counter };
			MPI_Send(&m, (int)sizeof m, MPI_BYTE, b.creator, tag, MPI_COMM_WORLD);
			MPI_Recv(members.data(), (int)(sizeof(join_msg) * members.size()), MPI_BYTE, b.creator, tag,
				 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		}
		for (int i = 0; i < nranks; i++)
			for (int j = 0; j < i; j++)
				if (members[(size_t)i].dev == members[(size_t)j].dev) {
					delete c;
					return fail(ncclInvalidUsage,
						    "Duplicate GPU detected: ranks %d and %d of a communicator both use "
						    "device %d (world ranks %d and %d)",
						    j, i, members[(size_t)i].dev, members[(size_t)j].world,
						    members[(size_t)i].world);
				}
		std::vector<int> &worlds = c->world;
		worlds.resize((size_t)nranks);
		for (int i = 0; i < nranks; i++)
			worlds[(size_t)i] = members[(size_t)i].world;
		MPI_Group wg, cg;
		MPI_Comm_group(MPI_COMM_WORLD, &wg);
		MPI_Group_incl(wg, nranks, worlds.data(), &cg);
		MPI_Comm_create_group(MPI_COMM_WORLD, cg, tag, &c->mpi);
		MPI_Group_free(&cg);
		MPI_Group_free(&wg);
	}
	c->index = comm_counter++;
	*comm = c;
	return ncclSuccess;
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t c)
{
	if (!c)
		return ncclSuccess;
	if (c->destroyed)
		return fail(ncclInvalidUsage, "communicator #%d destroyed twice", c->index);
	if (group_depth > 0)
		return fail(ncclInvalidUsage, "ncclCommDestroy inside a group call");
	emu::wait_until([c] { return c->completed == c->issued; }, "ncclCommDestroy (its queued operations)");
	if (c->mpi != MPI_COMM_NULL) {
		std::vector<MPI_Request> r(1);
		MPI_Ibarrier(c->mpi, &r[0]);
		char what[300];
		snprintf(what, sizeof what,
			 "ncclCommDestroy of communicator #%d (%d ranks, this rank %d) waits for its other ranks to "
			 "destroy it too; ranks that destroy their communicators in different orders wait for each other "
			 "(NCCL requires the same order on every rank: destroy in creation order)",
			 c->index, c->nranks, c->rank);
		wait_reqs(r, what);
		MPI_Comm_free(&c->mpi);
	}
	c->destroyed = true; /* kept: a use after destroy is then named */
	return ncclSuccess;
}

extern "C" ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error)
{
	emu::progress();
	*async_error = ncclSuccess;
	return comm ? ncclSuccess : ncclInvalidArgument;
}

extern "C" ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	*count = comm->nranks;
	return ncclSuccess;
}

extern "C" ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	*rank = comm->rank;
	return ncclSuccess;
}

extern "C" ncclResult_t ncclGroupStart(void)
{
	group_depth++;
	return ncclSuccess;
}

extern "C" ncclResult_t ncclGroupEnd(void)
{
	if (group_depth <= 0)
		return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
	if (--group_depth > 0)
		return ncclSuccess;
	std::vector<op> ops;
	ops.swap(pending);
	return issue(std::move(ops));
}

extern "C" ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
				 cudaStream_t stream)
{
	return add(make(OP_SEND, buf, NULL, count, type, ncclSum, -1, peer, comm, stream));
}

extern "C" ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
				 cudaStream_t stream)
{
	return add(make(OP_RECV, NULL, buf, count, type, ncclSum, -1, peer, comm, stream));
}

extern "C" ncclResult_t ncclAllReduce(const void *sendbuf, void *recvbuf, size_t count, ncclDataType_t type,
				      ncclRedOp_t red, ncclComm_t comm, cudaStream_t stream)
{
	return add(make(OP_ALLREDUCE, sendbuf, recvbuf, count, type, red, -1, -1, comm, stream));
}

extern "C" ncclResult_t ncclBroadcast(const void *sendbuf, void *recvbuf, size_t count, ncclDataType_t type, int root,
				      ncclComm_t comm, cudaStream_t stream)
{
	return add(make(OP_BCAST, sendbuf, recvbuf, count, type, ncclSum, root, -1, comm, stream));
}

extern "C" ncclResult_t ncclReduce(const void *sendbuf, void *recvbuf, size_t count, ncclDataType_t type,
				   ncclRedOp_t red, int root, ncclComm_t comm, cudaStream_t stream)
{
	return add(make(OP_REDUCE, sendbuf, recvbuf, count, type, red, root, -1, comm, stream));
}

extern "C" ncclResult_t ncclAllGather(const void *sendbuf, void *recvbuf, size_t sendcount, ncclDataType_t type,
				      ncclComm_t comm, cudaStream_t stream)
{
	return add(make(OP_ALLGATHER, sendbuf, recvbuf, sendcount, type, ncclSum, -1, -1, comm, stream));
}

extern "C" ncclResult_t ncclReduceScatter(const void *sendbuf, void *recvbuf, size_t recvcount, ncclDataType_t type,
					  ncclRedOp_t red, ncclComm_t comm, cudaStream_t stream)
{
	return add(make(OP_REDUCESCATTER, sendbuf, recvbuf, recvcount, type, red, -1, -1, comm, stream));
}
