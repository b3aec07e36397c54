"""dcp_forge.py DIR HOW: rewrite DIR/.metadata (a PyTorch Distributed
Checkpoint) with one defect, for the reader's refusals (megatron_ckpt.sh);
dcp_forge.py DIR HOW... --out OUT: each defect into OUT/HOW.metadata.

The metadata is read with Python's pickle into plain records (DCP's classes
are not needed) and written back under the same class names through
stand-in modules, so only the one change differs. HOW:
  overlap   the second chunk of a chunked tensor starts where the first does
  gap       a chunked tensor loses its last chunk (it no longer covers it)
  outside   a chunk reaches past its tensor's end
  nostorage a chunk's storage entry is removed
  unknown   a bytes item is declared as a class the reader does not know
  none      no defect: the same metadata, written back (the forger's own check)
For an fsdp_dtensor folder (items by their own names):
  nohalf    SwiGLU's first linear_fc1.weight_v is gone (its _w has no partner)
  expert    the first model.*.mlp.linear_fc2.weight is renamed into mlp.experts
  byindex   the first optimizer.state.<name>.exp_avg is renamed optimizer.state.0.exp_avg
"""
import pickle
import sys
import types

import torch  # noqa: F401 (torch.Size, dtypes: the real ones, as DCP writes them)

MODULES = {}


def stand_in(module, name):
    if module.startswith("torch.distributed.checkpoint") or module == "evilpayload":
        mod = MODULES.get(module)
        if mod is None:
            mod = MODULES[module] = types.ModuleType(module)
            sys.modules[module] = mod
        cls = getattr(mod, name, None)
        if cls is None:
            cls = type(name, (Record,), {"__module__": module, "__qualname__": name})
            setattr(mod, name, cls)
        return cls
    return None


class Record:
    def __init__(self, *args):
        self._args = args

    def __reduce_ex__(self, proto):
        if getattr(self, "_args", ()):
            return (type(self), self._args)
        return (copyreg_newobj, (type(self),), self.__dict__.get("_state"))

    def __setstate__(self, state):
        self._state = state


def copyreg_newobj(cls):
    return cls.__new__(cls)


copyreg_newobj.__module__ = "copyreg"
copyreg_newobj.__qualname__ = copyreg_newobj.__name__ = "__newobj__"


class Reader(pickle.Unpickler):
    def find_class(self, module, name):
        return stand_in(module, name) or super().find_class(module, name)


def main():
    """DIR HOW: DIR/.metadata rewritten with defect HOW. DIR HOW... --out OUT:
    each defect applied to a fresh read of DIR/.metadata, written to
    OUT/HOW.metadata (torch imported once for all)."""
    args = sys.argv[1:]
    out = None
    if "--out" in args:
        i = args.index("--out")
        out = args[i + 1]
        del args[i:i + 2]
    d, hows = args[0], args[1:]
    if out is None and len(hows) != 1:
        sys.exit("usage: dcp_forge.py DIR HOW | DIR HOW... --out OUT")
    for how in hows:
        forge(d, how, out + "/" + how + ".metadata" if out else d + "/.metadata")


def forge(d, how, dest):
    with open(d + "/.metadata", "rb") as f:
        meta = Reader(f).load()
    st = meta._state
    sdm, sd = st["state_dict_metadata"], st["storage_data"]
    multi = [k for k, v in sdm.items() if type(v).__name__ == "TensorStorageMetadata" and len(v._state["chunks"]) > 1]
    name = multi[0] if multi else None
    chunks = sdm[name]._state["chunks"] if multi else None

    def first(test):
        return next(k for k in sdm if test(k))

    def rename(old, new):
        sdm[new] = sdm.pop(old)
        for k in sd:
            if k._state["fqn"] == old:
                k._state["fqn"] = new
        pd = st.get("planner_data")
        if isinstance(pd, dict) and old in pd:
            pd.pop(old)
            pd[new] = tuple(new.split("."))

    if how == "nohalf":  # (the item, its storage and its planner path)
        name = first(lambda k: k.startswith("model.") and k.endswith("linear_fc1.weight_v"))
        del sdm[name]
        for k in [k for k in sd if k._state["fqn"] == name]:
            del sd[k]
        st["planner_data"].pop(name)
    elif how == "expert":
        name = first(lambda k: k.startswith("model.") and k.endswith(".mlp.linear_fc2.weight"))
        rename(name, name.replace(".mlp.linear_fc2.", ".mlp.experts.linear_fc2."))
    elif how == "byindex":
        name = first(lambda k: k.startswith("optimizer.state.") and k.endswith(".exp_avg"))
        rename(name, "optimizer.state.0.exp_avg")
    elif how == "overlap":
        chunks[1]._state["offsets"] = chunks[0]._state["offsets"]
    elif how == "gap":
        chunks.pop()
    elif how == "outside":
        size = list(sdm[name]._state["size"])
        off = list(chunks[-1]._state["offsets"])
        off[-1] = size[-1]
        chunks[-1]._state["offsets"] = torch.Size(off)
    elif how == "nostorage":
        for k in list(sd):
            if k._state["fqn"] == name:
                del sd[k]
                break
    elif how == "unknown":
        for k, v in sdm.items():
            if type(v).__name__ == "BytesStorageMetadata":
                sdm[k] = stand_in("evilpayload", "Gadget")()
                break
    elif how != "none":
        sys.exit("unknown defect " + how)
    with open(dest, "wb") as f:
        pickle.dump(meta, f, protocol=4)
    print(name)


if __name__ == "__main__":
    main()
