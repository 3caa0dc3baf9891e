"""The arms of the label-free adaptation benchmark (`domain_adaptation.py`), in table order: what each does to the
start on the corpus alone. No adaptation; the zero-shot RRF of BM25 and the start; MLM; TSDAE; SEED's weak decoder,
alone, after its new heads learn on the frozen start, and held near the start; a strong decoder; the weak decoder
alone, free or held near the start (its decoder at the default rate or a fast one); pseudo-label distillation from
each kind of pseudo-query (titles also judged on sentences; sentences also with a SPLADE model in the teacher, with
negatives mined from the start's own index, or with four negatives a pseudo-query, as titles judged on sentences and
first sentences judged on sentences are too); and SEED (unguarded, guarded by the start, or held near the start)
then pseudo-label distillation. How each runs is `adaptation.py`'s."""

from dataclasses import dataclass

from training.finetuning.pseudo_queries import CROPS, LEADS, SENTENCES, TITLES


@dataclass(frozen=True)
class AdaptationArm:
    """One way to continue the start on the corpus: pre-training flags for `training/pretrain.py`, TSDAE,
    pseudo-label distillation over `pseudo_queries` (`training/finetune.py`; its own dev split of `dev_pseudo_queries`
    when they differ; with `sparse_teacher`, the benchmark's SPLADE model joins its teacher; `negatives_per_query`
    negatives mined by `negatives`, `training/finetune.py`'s source: BM25 or the start's own index) continuing
    `student` (the start, or the model another arm adapted; with `start_is_candidate`, the start instead where it
    scores higher on the pseudo-dev: `--candidate_starts`), or none; `fusion`: no model of its own, the RRF of BM25
    and the start. With `warm_heads`, the pre-training runs in two halves of the steps: first only the new heads
    train, on the frozen start (`--freeze_encoder`, at the new decoder's rate), then everything, continuing that run
    (linear probing, then fine-tuning); with the same seed, the second half draws the first half's batches again."""

    key: str
    name: str
    pretraining_flags: tuple[str, ...] | None = None
    tsdae: bool = False
    pseudo_queries: tuple[str, ...] = ()
    dev_pseudo_queries: tuple[str, ...] = ()
    sparse_teacher: bool = False
    negatives: str = "bm25"
    negatives_per_query: int = 1
    student: str = "start"
    start_is_candidate: bool = False
    fusion: bool = False
    warm_heads: bool = False

    @property
    def adapts(self) -> bool:
        return self.tsdae or self.pretraining_flags is not None or bool(self.pseudo_queries)

    @property
    def distils(self) -> bool:
        return bool(self.pseudo_queries)


# The weak decoder of the paper: 3 layers, span 2. The condition is left to the start's pooling (the default a
# SentenceTransformer start gets), so the decoder reads the vector the start retrieves with.
WEAK = ("--decoder_num_layers", "3", "--decoder_attention_span", "2")
# `--anchor_loss_weight` of the anchored SEED arms. Measured from all-MiniLM-L6-v2 (6 steps x 8 SciFact abstracts at
# 1e-4): the vectors' mean cosine to the start's 0.945 without the anchor, 0.974 at 10 and 0.972 at 100, where the
# term's floor, dropout's own noise (1 - cosine 0.05 at the first step), leaves little more to hold.
ANCHOR_WEIGHTS = (10, 100)


def anchored_key(weight: int) -> str:
    """The key of the SEED arm held near the start at `weight`."""
    return f"seed-anchored-{weight}"


ANCHORED_THEN_PSEUDO_LABELS = f"{anchored_key(ANCHOR_WEIGHTS[0])}-then-pseudo-labels"
# The weak decoder alone held near the start: no MLM term, so no new head's gradients reach the encoder (MLM alone
# collapsed the corpus vectors as much as SEED did), and the decoder, the one objective left, reads the vector ten
# times as much as beside MLM (`cls_information`).
DECODER_ANCHORED = f"decoder-only-anchored-{ANCHOR_WEIGHTS[0]}"
# The same with the decoder at 3e-3, 100 times the encoder's rate, where a new weak decoder learns to read the frozen
# start's vector fastest: held-out `cls_information` after 64 steps x 16 SciFact abstracts on the frozen start (seed 1)
# 0.019 at 3e-4 (the arms' default rate), 0.142 at 1e-3, 0.169 at 3e-3, 0.014 at 1e-2; after 128 steps 0.138, 0.218,
# 0.293. At the default rate every decoder arm moved the encoder with a decoder that barely read the vector.
FAST_DECODER_RATE = "3e-3"
DECODER_ANCHORED_FAST = f"{DECODER_ANCHORED}-fast-decoder"
# Titles trained, the run's own dev split made of sentences of the held-out abstracts: SciFact's title dev split kept
# the start in both seeds although the rounds gained +0.014 ± 0.005 on test, since the start already finds a title's
# abstract at 0.905 nDCG@10 there; the benchmark's sentence pseudo-dev would have published both.
TITLES_JUDGED_ON_SENTENCES = "pseudo-labels-titles-judged-on-sentences"
# #35's default teacher where a SPLADE model is given: BM25, the start and splade-tiny. On PubMedQA the RRF of BM25 and
# the start is only 0.0005 above the start, so a teacher of those two alone has almost nothing to teach there.
SPARSE_TEACHER_ARM = "pseudo-labels-sentences-sparse-teacher"
# Negatives from the start's own index (`--negatives model`), as GPL mines them with trained dense retrievers, where
# every other pseudo-label arm mines with BM25: a teacher half made of BM25 preferred the source passage over a BM25
# negative in 93-99.7% of the pseudo-queries, so its margins told the student little it did not know. A negative the
# start itself ranks high is where the start errs, and where BM25's half of the teacher can disagree with it.
OWN_NEGATIVES_ARM = "pseudo-labels-sentences-own-negatives"
# Four BM25 negatives a pseudo-query in place of one: the teacher's margins over four passages tell the student more of
# its ranking per pseudo-query (a teacher that prefers the source over one negative in 96% of them may not over four).
FOUR_NEGATIVES_ARM = "pseudo-labels-sentences-4-negatives"
# The same four negatives under the recipe the README recommends where a corpus has titles.
TITLES_FOUR_NEGATIVES_ARM = f"{TITLES_JUDGED_ON_SENTENCES}-4-negatives"
# A passage's first sentence in place of a title, for corpora without one, such as PubMedQA's: there a question was
# written from its paper's title, and the start misses its abstract (16 of 500 test questions) mostly where BM25 finds
# it, so the score-level fusion of the two, which the teacher is, ranks better than either (0.984 against 0.982).
# Four negatives and a sentence dev split, as the titles recipe above; the arm's claim is against the same recipe with
# sentences (FOUR_NEGATIVES_ARM).
LEADS_FOUR_NEGATIVES_ARM = "pseudo-labels-leads-4-negatives"
START = AdaptationArm("start", "no adaptation (the start as it is)")
SEED = AdaptationArm("seed", "SEED: MLM + weak decoder (3 layers, span 2) on the pooled vector", WEAK)
ARMS = (
    START,
    AdaptationArm("rrf", "zero-shot RRF of BM25 and the start (no training)", fusion=True),
    AdaptationArm("mlm", "MLM only (λ = 0)", ("--decoder_loss_weight", "0")),
    AdaptationArm("tsdae", "TSDAE (sentence-transformers, deletion 0.6, tied decoder)", tsdae=True),
    SEED,
    AdaptationArm(
        "seed-warm-heads", "SEED after its new heads learn on the frozen start (half the steps each)", WEAK,
        warm_heads=True,
    ),
    *(
        AdaptationArm(
            anchored_key(weight),
            f"SEED held near the start (anchor weight {weight}: 1 − cosine to the frozen start's vector)",
            (*WEAK, "--anchor_loss_weight", str(weight)),
        )
        for weight in ANCHOR_WEIGHTS
    ),
    AdaptationArm(
        "strong-decoder", "MLM + strong decoder (3 layers, full span) on the pooled vector",
        ("--decoder_num_layers", "3", "--decoder_attention_span", "full"),
    ),
    AdaptationArm("decoder-only", "weak decoder alone (no MLM) on the pooled vector", (*WEAK, "--mlm_loss_weight", "0")),
    AdaptationArm(
        DECODER_ANCHORED,
        f"weak decoder alone held near the start (no MLM, anchor weight {ANCHOR_WEIGHTS[0]})",
        (*WEAK, "--mlm_loss_weight", "0", "--anchor_loss_weight", str(ANCHOR_WEIGHTS[0])),
    ),
    AdaptationArm(
        DECODER_ANCHORED_FAST,
        f"weak decoder alone held near the start (no MLM, anchor weight {ANCHOR_WEIGHTS[0]}), decoder rate {FAST_DECODER_RATE}",
        (*WEAK, "--mlm_loss_weight", "0", "--anchor_loss_weight", str(ANCHOR_WEIGHTS[0]),
         "--decoder_learning_rate", FAST_DECODER_RATE),
    ),
    *(
        AdaptationArm(f"pseudo-labels-{kind}", f"pseudo-label distillation, {kind} as pseudo-queries", pseudo_queries=(kind,))
        for kind in (SENTENCES, TITLES, CROPS)
    ),
    AdaptationArm(
        TITLES_JUDGED_ON_SENTENCES, "pseudo-label distillation, titles as pseudo-queries, its own dev split of sentences",
        pseudo_queries=(TITLES,), dev_pseudo_queries=(SENTENCES,),
    ),
    AdaptationArm(
        SPARSE_TEACHER_ARM, "pseudo-label distillation, sentences as pseudo-queries, teacher BM25 + the start + SPLADE",
        pseudo_queries=(SENTENCES,), sparse_teacher=True,
    ),
    AdaptationArm(
        OWN_NEGATIVES_ARM,
        "pseudo-label distillation, sentences as pseudo-queries, negatives from the start's own index",
        pseudo_queries=(SENTENCES,), negatives="model",
    ),
    AdaptationArm(
        FOUR_NEGATIVES_ARM, "pseudo-label distillation, sentences as pseudo-queries, four BM25 negatives each",
        pseudo_queries=(SENTENCES,), negatives_per_query=4,
    ),
    AdaptationArm(
        TITLES_FOUR_NEGATIVES_ARM,
        "pseudo-label distillation, titles as pseudo-queries, four BM25 negatives each, its own dev split of sentences",
        pseudo_queries=(TITLES,), dev_pseudo_queries=(SENTENCES,), negatives_per_query=4,
    ),
    AdaptationArm(
        LEADS_FOUR_NEGATIVES_ARM,
        "pseudo-label distillation, first sentences as pseudo-queries, four BM25 negatives each, its own dev split of "
        "sentences",
        pseudo_queries=(LEADS,), dev_pseudo_queries=(SENTENCES,), negatives_per_query=4,
    ),
    AdaptationArm(
        "seed-then-pseudo-labels", "SEED, then pseudo-label distillation with sentences", pseudo_queries=(SENTENCES,),
        student=SEED.key,
    ),
    AdaptationArm(
        "seed-or-start-then-pseudo-labels",
        "SEED, then pseudo-label distillation with sentences from SEED's model or the start, the better on the pseudo-dev",
        pseudo_queries=(SENTENCES,), student=SEED.key, start_is_candidate=True,
    ),
    AdaptationArm(
        ANCHORED_THEN_PSEUDO_LABELS,
        f"SEED held near the start (anchor weight {ANCHOR_WEIGHTS[0]}), then pseudo-label distillation with sentences",
        pseudo_queries=(SENTENCES,), student=anchored_key(ANCHOR_WEIGHTS[0]),
    ),
)
BY_KEY = {arm.key: arm for arm in ARMS}
