"""The shape matrix benchmark (issue 12): edgescore against its peers across model shapes."""
