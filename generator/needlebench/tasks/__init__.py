"""Stage 3-4: sample plans and rendered prompts, one module per benchmark family (registered in
:mod:`needlebench.tasks.families`), with the grid, placement, prompt frames and needle banks they share."""
