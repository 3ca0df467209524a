"""Operator class of a reference program, by regex over its source, first match in the paper's priority.

Priority: attention, scan, matmul, conv, norm, softmax, reduction, elementwise, other. The order resolves
mixtures the way the audit wants them: an attention block contains matmuls and a softmax but is audited as
attention; a conv followed by a norm is a conv; a softmax is a reduction underneath but gets its own class.
Comments and docstrings are removed first so that prose ("unlike attention, ...") does not decide a class.
Elementwise is keyword-based only: bare arithmetic occurs in every get_inputs() and would leave "other" empty.
"""

from __future__ import annotations

import io
import re
import tokenize

CLASSES = ("attention", "scan", "matmul", "conv", "norm", "softmax", "reduction", "elementwise", "other")
# The seven classes the paper audits (elementwise and other are extracted but not audited).
AUDITED = ("matmul", "attention", "softmax", "scan", "norm", "conv", "reduction")

_PATTERNS: dict[str, re.Pattern[str]] = {
    "attention": re.compile(
        r"scaled_dot_product_attention|MultiheadAttention|multi_head_attention|\battn\b|[Aa]ttention\b"
        r"|flash_attn|\bq\s*@\s*k\.(?:transpose|T\b|mT\b)|\bquery\b[^\n]*\bkey\b"
    ),
    "scan": re.compile(
        r"\b(?:cumsum|cumprod|cummax|cummin|logcumsumexp|associative_scan)\b|\bscan\b|\bselective_scan"
    ),
    "matmul": re.compile(
        r"\b(?:matmul|bmm|mm|addmm|baddbmm|addbmm|addmv|mv|einsum|tensordot|linear|Linear|Bilinear|bilinear|"
        r"chain_matmul|outer|inner|kron)\s*\(|[\w\)\]][ \t]*@[ \t]*[\w\(]"
    ),
    "conv": re.compile(r"\b(?:Conv[123]d|ConvTranspose[123]d|conv[123]d|conv_transpose[123]d|unfold|Unfold|fold)\b"),
    "norm": re.compile(
        r"\b(?:LayerNorm|BatchNorm[123]d|GroupNorm|InstanceNorm[123]d|RMSNorm|LocalResponseNorm|layer_norm|"
        r"batch_norm|group_norm|instance_norm|rms_norm|normalize|local_response_norm)\b"
        r"|\bnorm\s*\(|\brsqrt\s*\("
    ),
    "softmax": re.compile(r"\b(?:softmax|log_softmax|Softmax|LogSoftmax|softmin|Softmin|gumbel_softmax)\b"),
    "reduction": re.compile(
        r"\.(?:sum|mean|amax|amin|max|min|prod|var|std|argmax|argmin|logsumexp|all|any|median|mode|norm|count_nonzero)"
        r"\s*\(|\btorch\.(?:sum|mean|amax|amin|max|min|prod|var|std|argmax|argmin|logsumexp|median|mode|nansum|"
        r"nanmean|count_nonzero|var_mean|std_mean)\s*\("
        r"|\b(?:MaxPool[123]d|AvgPool[123]d|AdaptiveAvgPool[123]d|AdaptiveMaxPool[123]d|max_pool[123]d|avg_pool[123]d|"
        r"adaptive_avg_pool[123]d|adaptive_max_pool[123]d)\b"
        r"|\b(?:cross_entropy|nll_loss|mse_loss|l1_loss|smooth_l1_loss|kl_div|huber_loss|cosine_similarity|"
        r"binary_cross_entropy|binary_cross_entropy_with_logits|triplet_margin_loss|hinge_embedding_loss|"
        r"margin_ranking_loss|CrossEntropyLoss|MSELoss|KLDivLoss|HuberLoss|TripletMarginLoss)\b"
    ),
    "elementwise": re.compile(
        r"\b(?:relu|relu6|gelu|silu|sigmoid|tanh|elu|selu|celu|mish|softplus|softsign|hardtanh|hardswish|"
        r"hardsigmoid|leaky_relu|exp|log|log1p|expm1|sqrt|abs|clamp|clip|where|neg|reciprocal|pow|sin|cos|"
        r"ReLU|GELU|SiLU|Sigmoid|Tanh|ELU|SELU|Mish|Softplus|Hardtanh|Hardswish|LeakyReLU|Dropout|dropout|"
        r"add|mul|sub|div|maximum|minimum|sign|floor|ceil|round|erf)\b"
    ),
}


def strip_comments(src: str) -> str:
    """Source without comments and docstring-like bare string statements; the raw source if it cannot tokenize."""
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return src
    out = []
    prev = tokenize.INDENT
    for tok in toks:
        if tok.type == tokenize.COMMENT:
            continue
        # A string that starts a logical line is a docstring or a bare expression: prose, not code.
        if tok.type == tokenize.STRING and prev in (tokenize.INDENT, tokenize.NEWLINE, tokenize.DEDENT, tokenize.NL):
            prev = tok.type
            continue
        out.append(tok)
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            prev = tok.type
    try:
        return tokenize.untokenize(out)
    except ValueError:
        return src


def classify(reference_src: str) -> str:
    """The first class in priority order whose pattern occurs in the de-commented reference source."""
    code = strip_comments(reference_src or "")
    for cls in CLASSES[:-1]:
        if _PATTERNS[cls].search(code):
            return cls
    return "other"
