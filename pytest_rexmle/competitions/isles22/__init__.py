"""ISLES'22: ischaemic stroke lesion segmentation on DWI/ADC/FLAIR."""
