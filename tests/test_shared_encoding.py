"""Work the main process runs alone shares its encodings among the processes: each encodes one contiguous slice of the
texts, the slices balanced; in one process the work runs as it would alone. The two-process specification, a whole
fine-tuning run against a one-process one, is in test_finetune_distributed.py."""

import numpy as np
from sentence_transformers import SentenceTransformer

from training.common.shared_encoding import SharedEncoding, slice_bounds


def test_the_slices_cover_every_text_once_in_order_and_differ_by_one_at_most():
    for count, processes in [(10, 2), (11, 2), (7, 3), (2, 4), (0, 2)]:
        bounds = slice_bounds(count, processes)
        sizes = [end - start for start, end in bounds]

        assert len(bounds) == processes
        assert [index for start, end in bounds for index in range(start, end)] == list(range(count))
        assert max(sizes) - min(sizes) <= 1, (count, processes)


def test_in_one_process_the_work_runs_as_it_would_alone_and_nothing_is_counted(minilm_dir):
    model = SentenceTransformer(str(minilm_dir))
    documents = [f"passage {number} about cells" + " and tissue" * number for number in range(7)]
    sharing = SharedEncoding()

    shared, hook = sharing.run(
        "evaluation", [model], lambda: (model.encode_document(documents), model._distributed_inference)
    )

    np.testing.assert_array_equal(shared, model.encode_document(documents))
    assert hook is None  # the model untouched: SPLADE's encode_sparse keeps its fast path only without a hook
    assert sharing.per_process() == {}
