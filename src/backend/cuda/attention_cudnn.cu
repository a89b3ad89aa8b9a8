/* attention_cudnn.cu: cuDNN's fused flash attention for the CUDA backend (attention_cudnn.h
 * says what it takes and why). C++ because cuDNN offers SDPA through its C++ frontend; the
 * interface is C.
 *
 * Per (direction, shape, dtype, scale, determinism) one frontend graph is built on first use
 * (heuristics mode A, the plan cuDNN ranks first) and cached; a shape cuDNN refuses is
 * cached as refused, so the fallback costs nothing after the first step. Tensors are
 * described by strides over our buffers, no copies, except the query heads when groups
 * hold several (attention_qpack.cu): the keys and values are read, and their gradients
 * written, in place in the packed QKV. */
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING 1
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/attention_cudnn.h"
#include "backend/cuda/cuda_internal.h"

namespace fe = cudnn_frontend;

/* The frontend's dynamic-loading hook (declared extern in its shim): libcudnn.so.9, opened
 * once per process. */
namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;
}

namespace {

enum : int64_t { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };

struct GraphKey {
    bool backward;
    int64_t S, B, H, G, d;
    mc_dtype dtype;
    float scale;
    bool deterministic;
    bool operator==(const GraphKey &o) const {
        return backward == o.backward && S == o.S && B == o.B && H == o.H && G == o.G && d == o.d &&
               dtype == o.dtype && scale == o.scale && deterministic == o.deterministic;
    }
};

struct GraphEntry {
    GraphKey key;
    std::shared_ptr<fe::graph::Graph> graph; /* null: cuDNN refused this problem */
    int64_t workspace;
};

}  // namespace

struct mc_cudnn_attn {
    cudnnHandle_t handle;
    std::vector<GraphEntry> graphs;
};

namespace {

bool env_is(const char *name, const char *value) {
    const char *e = getenv(name);
    return e && strcmp(e, value) == 0;
}

/* libcudnn.so.9 once per process; false when absent. */
bool cudnn_loaded() {
    static int state = -1;
    if (state < 0) {
        fe::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
        state = fe::cudnn_dlhandle ? 1 : 0;
        if (!fe::cudnn_dlhandle && env_is("MC_ATTN_CUDNN", "1"))
            fprintf(stderr, "megatron-c: note: MC_ATTN_CUDNN=1 but libcudnn.so.9 could not be loaded (%s): "
                            "attention runs on our own kernels\n", dlerror());
    }
    return state == 1;
}

/* The state's cuDNN handle on its stream, made on first use; null when cuDNN is unusable. */
mc_cudnn_attn *attn_state(mc_cuda_state *st) {
    if (st->cudnn_off) return nullptr;
    if (st->cudnn) return st->cudnn;
    if (env_is("MC_ATTN_CUDNN", "0") || (getenv("MC_ATTN_SIMPLE") && !env_is("MC_ATTN_SIMPLE", "0")) ||
        !cudnn_loaded()) {
        st->cudnn_off = true;
        return nullptr;
    }
    cudnnHandle_t h = nullptr;
    try {
        if (fe::detail::create_handle(&h) != CUDNN_STATUS_SUCCESS || fe::detail::set_stream(h, st->stream) !=
                                                                         CUDNN_STATUS_SUCCESS) {
            st->cudnn_off = true;
            return nullptr;
        }
    } catch (const std::exception &e) {
        fprintf(stderr, "megatron-c: note: cuDNN attention unavailable (%s): attention runs on our own kernels\n",
                e.what());
        st->cudnn_off = true;
        return nullptr;
    }
    st->cudnn = new mc_cudnn_attn{h, {}};
    return st->cudnn;
}

bool problem_taken(const mc_tensor *qkv, const mc_attn_desc *d) {
    return (qkv->dtype == MC_BF16 || qkv->dtype == MC_F16) && d->dropout == 0.0f && !mc_tensor_present(&d->seg_start) &&
           d->head_dim % 8 == 0 && d->head_dim <= 256 && d->heads % d->groups == 0;
}

/* Strides over our buffers (elements), dims [B, heads, S, d]. */
struct Layout {
    std::vector<int64_t> q, kv, o, stats;
    bool packed_q; /* queries through the plain [S, B, H, d] buffer */
};

Layout layout_of(const GraphKey &k) {
    const int64_t hpg = k.H / k.G, ts = (k.H + 2 * k.G) * k.d, row = k.B * ts;
    Layout l;
    l.packed_q = hpg > 1;
    l.o = {k.H * k.d, k.d, k.B * k.H * k.d, 1};
    l.q = l.packed_q ? l.o : std::vector<int64_t>{ts, (hpg + 2) * k.d, row, 1};
    l.kv = {ts, (hpg + 2) * k.d, row, 1};
    l.stats = {k.H * k.S, k.S, 1, 1};
    return l;
}

std::shared_ptr<fe::graph::Graph> build_graph(cudnnHandle_t h, const GraphKey &k, int64_t *workspace,
                                              std::string *why) {
    const Layout l = layout_of(k);
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(k.dtype == MC_BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto tensor = [&](const char *name, int64_t uid, int64_t heads, const std::vector<int64_t> &stride) {
        return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({k.B, heads, k.S, k.d}).set_stride(
            stride));
    };
    auto Q = tensor("Q", UID_Q, k.H, l.q);
    auto K = tensor("K", UID_K, k.G, l.kv);
    auto V = tensor("V", UID_V, k.G, l.kv);
    if (!k.backward) {
        auto opts = fe::graph::SDPA_attributes()
                        .set_name("mc_attention_fwd")
                        .set_generate_stats(true)
                        .set_attn_scale(k.scale)
                        .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                        .set_diagonal_band_right_bound(0);
        auto [O, Stats] = g->sdpa(Q, K, V, opts);
        O->set_output(true).set_uid(UID_O).set_dim({k.B, k.H, k.S, k.d}).set_stride(l.o);
        Stats->set_output(true).set_uid(UID_STATS).set_data_type(fe::DataType_t::FLOAT).set_dim({k.B, k.H, k.S, 1}).set_stride(
            l.stats);
    } else {
        auto O = tensor("O", UID_O, k.H, l.o);
        auto dO = tensor("dO", UID_DO, k.H, l.o);
        auto Stats = g->tensor(fe::graph::Tensor_attributes()
                                   .set_name("Stats")
                                   .set_uid(UID_STATS)
                                   .set_dim({k.B, k.H, k.S, 1})
                                   .set_stride(l.stats)
                                   .set_data_type(fe::DataType_t::FLOAT));
        auto opts = fe::graph::SDPA_backward_attributes()
                        .set_name("mc_attention_bwd")
                        .set_attn_scale(k.scale)
                        .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                        .set_diagonal_band_right_bound(0)
                        .set_deterministic_algorithm(k.deterministic);
        auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, Stats, opts);
        dQ->set_output(true).set_uid(UID_DQ).set_dim({k.B, k.H, k.S, k.d}).set_stride(l.q);
        dK->set_output(true).set_uid(UID_DK).set_dim({k.B, k.G, k.S, k.d}).set_stride(l.kv);
        dV->set_output(true).set_uid(UID_DV).set_dim({k.B, k.G, k.S, k.d}).set_stride(l.kv);
    }
    fe::error_t built = g->build(h, {fe::HeurMode_t::A});
    if (!built.is_good()) {
        *why = built.get_message();
        return nullptr;
    }
    fe::error_t sized = g->get_workspace_size(*workspace);
    if (!sized.is_good()) {
        *why = sized.get_message();
        return nullptr;
    }
    return g;
}

/* The cached graph for this problem, built on first use; null when cuDNN refuses it (said
 * once per shape when MC_ATTN_CUDNN=1 asked for cuDNN). */
const GraphEntry *graph_for(mc_cudnn_attn *a, const GraphKey &k) {
    for (const GraphEntry &e : a->graphs)
        if (e.key == k) return &e;
    GraphEntry e{k, nullptr, 0};
    std::string why;
    try {
        e.graph = build_graph(a->handle, k, &e.workspace, &why);
    } catch (const std::exception &ex) {
        why = ex.what();
        e.graph = nullptr;
    }
    if (!e.graph && env_is("MC_ATTN_CUDNN", "1"))
        fprintf(stderr, "megatron-c: note: cuDNN refused the attention %s (S %lld, B %lld, heads %lld/%lld, d %lld%s): "
                        "%s; our own kernels run it\n",
                k.backward ? "backward" : "forward", (long long)k.S, (long long)k.B, (long long)k.H, (long long)k.G,
                (long long)k.d, k.deterministic ? ", deterministic" : "", why.c_str());
    a->graphs.push_back(e);
    return &a->graphs.back();
}

GraphKey key_of(bool backward, const mc_tensor *qkv, const mc_attn_desc *d) {
    return GraphKey{backward, d->seq, d->batch, d->heads, d->groups, d->head_dim, qkv->dtype, d->softmax_scale,
                    backward && d->deterministic};
}

/* Workspace: cuDNN's, then the plain query buffer (and its gradient's), each 256-aligned. */
size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

}  // namespace

extern "C" bool mc_cudnn_attention_fwd(mc_cuda_state *st, mc_tensor *out, mc_tensor *lse, const mc_tensor *qkv,
                                       const mc_attn_desc *d) {
    if (!problem_taken(qkv, d)) return false;
    mc_cudnn_attn *a = attn_state(st);
    if (!a) return false;
    const GraphKey k = key_of(false, qkv, d);
    const GraphEntry *e = graph_for(a, k);
    if (!e->graph) return false;
    const Layout l = layout_of(k);
    const size_t es = mc_dtype_size(qkv->dtype), qbytes = (size_t)(k.S * k.B * k.H * k.d) * es;
    const size_t ws_bytes = align256((size_t)e->workspace) + (l.packed_q ? qbytes : 0);
    char *ws = (char *)mc_cuda_workspace(st, ws_bytes, "attention_fwd (cuDNN)");
    char *base = (char *)qkv->data;
    void *q = base;
    if (l.packed_q) {
        q = ws + align256((size_t)e->workspace);
        mc_cuda_qheads_pack(st, q, qkv->data, d, qkv->dtype);
    }
    const int64_t hpg = k.H / k.G;
    std::unordered_map<int64_t, void *> pack = {{UID_Q, q},
                                                {UID_K, base + (size_t)(hpg * k.d) * es},
                                                {UID_V, base + (size_t)((hpg + 1) * k.d) * es},
                                                {UID_O, out->data},
                                                {UID_STATS, lse->data}};
    fe::error_t r = e->graph->execute(a->handle, pack, e->workspace ? ws : nullptr);
    if (!r.is_good())
        mc_assert_fail("execute", __FILE__, __LINE__, "cuda attention_fwd (cuDNN): execute failed: %s",
                       r.get_message().c_str());
    MC_CUDA_LAUNCHED(st, "attention_fwd (cuDNN)");
    return true;
}

extern "C" bool mc_cudnn_attention_bwd(mc_cuda_state *st, mc_tensor *dqkv, const mc_tensor *dout, const mc_tensor *qkv,
                                       const mc_tensor *out, const mc_tensor *lse, const mc_attn_desc *d) {
    if (!problem_taken(qkv, d)) return false;
    mc_cudnn_attn *a = attn_state(st);
    if (!a) return false;
    const GraphKey k = key_of(true, qkv, d);
    const GraphEntry *e = graph_for(a, k);
    if (!e->graph) return false;
    const Layout l = layout_of(k);
    const size_t es = mc_dtype_size(qkv->dtype), qbytes = align256((size_t)(k.S * k.B * k.H * k.d) * es);
    const size_t ws_bytes = align256((size_t)e->workspace) + (l.packed_q ? 2 * qbytes : 0);
    char *ws = (char *)mc_cuda_workspace(st, ws_bytes, "attention_bwd (cuDNN)");
    char *base = (char *)qkv->data, *dbase = (char *)dqkv->data;
    void *q = base, *dq = dbase;
    if (l.packed_q) {
        q = ws + align256((size_t)e->workspace);
        dq = (char *)q + qbytes;
        mc_cuda_qheads_pack(st, q, qkv->data, d, qkv->dtype);
    }
    const int64_t hpg = k.H / k.G;
    const size_t koff = (size_t)(hpg * k.d) * es, voff = (size_t)((hpg + 1) * k.d) * es;
    std::unordered_map<int64_t, void *> pack = {
        {UID_Q, q},           {UID_K, base + koff},   {UID_V, base + voff},   {UID_O, out->data},
        {UID_DO, dout->data}, {UID_STATS, lse->data}, {UID_DQ, dq},           {UID_DK, dbase + koff},
        {UID_DV, dbase + voff}};
    fe::error_t r = e->graph->execute(a->handle, pack, e->workspace ? ws : nullptr);
    if (!r.is_good())
        mc_assert_fail("execute", __FILE__, __LINE__, "cuda attention_bwd (cuDNN): execute failed: %s",
                       r.get_message().c_str());
    MC_CUDA_LAUNCHED(st, "attention_bwd (cuDNN)");
    if (l.packed_q) mc_cuda_qheads_unpack(st, dqkv->data, dq, d, qkv->dtype);
    return true;
}

extern "C" void mc_cudnn_attention_release(mc_cuda_state *st) {
    if (!st->cudnn) return;
    st->cudnn->graphs.clear();
    if (st->cudnn->handle) fe::detail::destroy_handle(st->cudnn->handle);
    delete st->cudnn;
    st->cudnn = nullptr;
}
