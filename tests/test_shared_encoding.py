"""Work the main process runs alone shares its encodings among the processes: each encodes one contiguous slice of the
texts, the slices balanced; in one process the work runs as it would alone. The two-process specification, a whole
fine-tuning run against a one-process one, is in test_finetune_distributed.py."""

import numpy as np
from sentence_transformers import SentenceTransformer

from training.common.shared_encoding import SharedEncoding, request_rounds, slice_bounds


def test_the_slices_cover_every_text_once_in_order_and_differ_by_one_at_most():
    for count, processes in [(10, 2), (11, 2), (7, 3), (2, 4), (0, 2)]:
        bounds = slice_bounds(count, processes)
        sizes = [end - start for start, end in bounds]

        assert len(bounds) == processes
        assert [index for start, end in bounds for index in range(start, end)] == list(range(count))
        assert max(sizes) - min(sizes) <= 1, (count, processes)


def test_a_large_encoding_travels_in_rounds_of_bounded_slices_that_cover_every_text_once_in_order():
    """At most `per_process` texts a process a round, so no process sends its whole share in one message."""
    for count, processes, per_process in [(10, 2, 3), (12, 2, 3), (5, 2, 3), (7, 3, 1), (0, 2, 3)]:
        rounds = request_rounds(count, processes, per_process)
        in_order = [index for bounds in rounds for start, end in bounds for index in range(start, end)]
        shares = [sum(bounds[rank][1] - bounds[rank][0] for bounds in rounds) for rank in range(processes)]

        assert in_order == list(range(count)), (count, processes, per_process)
        assert all(end - start <= per_process for bounds in rounds for start, end in bounds)
        assert len(rounds) == -(-count // (per_process * processes))
        assert max(shares, default=0) - min(shares, default=0) <= len(rounds)  # balanced to a text a round


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
