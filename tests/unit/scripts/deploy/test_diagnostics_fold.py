"""A failed e2e test prints each container's log tail (ComposeDeployment.diagnostics): a retry
loop's lines, alike but for their numbers, are folded so they do not push the rest out."""

from scripts.deploy.deployment import fold_alike


def test_a_cycle_of_retry_lines_folds_to_its_first_lines_a_count_and_its_last():
    cycle = ["10:00:0{i}.1 retry 1 of ListOffsets in 0.05 s",
             "10:00:0{i}.2 retry 2 of ListOffsets in 0.08 s",
             "10:00:0{i}.3 offsets of sessions/0 failed; retrying in 0.{i} s"]
    lines = [line.format(i=i) for i in range(5) for line in cycle]
    folded = fold_alike([*lines, "10:00:09 leader of epoch 4", "10:00:09 session done"])
    assert folded[0] == lines[0] and folded[-2:] == ["10:00:09 leader of epoch 4",
                                                     "10:00:09 session done"]
    assert any("more lines like those above, the last: " + lines[-1] in f for f in folded)
    assert len(folded) <= 6, folded


def test_distinct_lines_are_all_kept():
    lines = [f"line {word}" for word in ("alpha", "beta", "gamma", "delta", "epsilon")]
    assert fold_alike(lines) == lines
