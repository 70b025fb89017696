"""Apache Beam pipelines that run evaluations (entry point: `python -m evals.run`).

Modules, in the order a run uses them:

    runner       validate everything (nothing written on bad input), run, report
    generation   the RunInference ModelHandler over tfspec.generate (timing, calibration)
    evaluation   the pipeline: generate -> score -> journal -> combine -> summary files
    journal      examples.jsonl as an append-only, once-per-key journal (resumability)
    combiners    CombineFns for quality, latency and acceptance
    outputs      output folder checks and file I/O through Beam FileSystems (gs:// too)
    progress     the progress bar that follows the journal

DirectRunner (one process, or `--direct_num_workers N --direct_running_mode
multi_processing`) is the default. On Dataflow (`pip install -e .[dataflow]`; the output
folder must be gs://; workers install the package from setup.py):

    python -m evals.run --task humaneval --k 4 \
        --output_dir gs://BUCKET/runs/humaneval-k4 \
        --runner DataflowRunner --project PROJECT --region REGION \
        --temp_location gs://BUCKET/tmp --setup_file ./setup.py \
        --max_num_workers 4 --number_of_worker_harness_threads 1

Model specs must resolve on the workers (zoo: names ship in the package; hf:// needs
network there). GPU or TPU workers add, e.g.:

    --worker_machine_type g2-standard-8 \
    --dataflow_service_options "worker_accelerator=type:nvidia-l4;count:1;install-nvidia-driver" \
    --sdk_container_image IMAGE   # Beam 2.77 + TensorFlow 2.21 with CUDA

    --tpu local --worker_machine_type ct5lp-hightpu-1t \
    --dataflow_service_options "worker_accelerator=type:tpu-v5-lite-podslice;topology:1x1" \
    --sdk_container_image IMAGE   # Beam 2.77 + tfspec[tpu]
"""
