"""The training loss, composed from sentence-transformers' losses rather than chosen by branches.

A ranking loss (in-batch negatives, its cached GradCache form, MarginMSE or KL distillation) is
picked for the model's kind; a sparse model's is then wrapped in `SpladeLoss`, which adds FLOPS
regularisation of queries and documents.

Similarities: the dense student compares cosines; in-batch softmax logits are cosines times
`similarity_scale`. A sparse student scores by dot product. Teacher scores arrive standardised (zero
mean, unit variance) and multiplied by the family's `teacher_label_scale`, which puts them on the
student's scale.
"""

from dataclasses import dataclass

from sentence_transformers.sentence_transformer import losses as dense_losses
from sentence_transformers.sparse_encoder import losses as sparse_losses
from sentence_transformers.util import pairwise_cos_sim
from torch import nn

from .arguments import RecipeArguments


@dataclass
class SparseRegularisation:
    query_weight: float
    document_weight: float


def ranking_loss(model, recipe: RecipeArguments, sparse: bool) -> nn.Module:
    if recipe.teacher:
        if recipe.distillation == "margin_mse":
            if sparse:
                return sparse_losses.SparseMarginMSELoss(model)
            return dense_losses.MarginMSELoss(model, similarity_fct=pairwise_cos_sim)
        if sparse:
            return sparse_losses.SparseDistillKLDivLoss(model, temperature=1.0)
        return dense_losses.DistillKLDivLoss(
            model, similarity_fct=pairwise_cos_sim, temperature=1.0 / recipe.similarity_scale
        )
    # Every process's in-batch texts serve as negatives for all of them under DDP.
    if sparse:
        return sparse_losses.SparseMultipleNegativesRankingLoss(model, gather_across_devices=True)
    if recipe.mini_batch_size:
        return dense_losses.CachedMultipleNegativesRankingLoss(
            model, scale=recipe.similarity_scale, mini_batch_size=recipe.mini_batch_size, gather_across_devices=True
        )
    return dense_losses.MultipleNegativesRankingLoss(model, scale=recipe.similarity_scale, gather_across_devices=True)


def build_loss(model, recipe: RecipeArguments, regularisation: SparseRegularisation | None = None) -> nn.Module:
    """The ranking loss; for a sparse model (`regularisation` given), wrapped in SpladeLoss."""
    loss = ranking_loss(model, recipe, sparse=regularisation is not None)
    if regularisation is None:
        return loss
    splade = sparse_losses.CachedSpladeLoss if recipe.mini_batch_size else sparse_losses.SpladeLoss
    extra = {"mini_batch_size": recipe.mini_batch_size} if recipe.mini_batch_size else {}
    return splade(
        model,
        loss=loss,
        query_regularizer_weight=regularisation.query_weight,
        document_regularizer_weight=regularisation.document_weight,
        **extra,
    )
