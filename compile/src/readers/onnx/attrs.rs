//! Typed access to a node's attributes, and decoding of the `*_as_tensor` tensors.

use super::error::{malformed, unsupported};
use super::pb;
use crate::readers::error::ReadError;

// `AttributeProto.type` values (onnx.proto `AttributeType`).
const A_UNDEFINED: i32 = 0;
const A_FLOAT: i32 = 1;
const A_INT: i32 = 2;
const A_STRING: i32 = 3;
const A_TENSOR: i32 = 4;
const A_FLOATS: i32 = 6;
const A_INTS: i32 = 7;
const A_STRINGS: i32 = 8;

// `TensorProto.data_type` values.
pub(super) const T_FLOAT: i32 = 1;
pub(super) const T_UINT8: i32 = 2;
pub(super) const T_DOUBLE: i32 = 11;

fn type_name(t: i32) -> String {
    match t {
        A_UNDEFINED => "UNDEFINED".into(),
        A_FLOAT => "FLOAT".into(),
        A_INT => "INT".into(),
        A_STRING => "STRING".into(),
        A_TENSOR => "TENSOR".into(),
        5 => "GRAPH".into(),
        A_FLOATS => "FLOATS".into(),
        A_INTS => "INTS".into(),
        A_STRINGS => "STRINGS".into(),
        other => format!("#{other}"),
    }
}

/// The attributes of one node, looked up by name (duplicates refused up front).
pub(super) struct Attrs<'a> {
    op: &'a str,
    list: &'a [pb::AttributeProto],
}

impl<'a> Attrs<'a> {
    pub fn new(node: &'a pb::NodeProto) -> Result<Self, ReadError> {
        let list = &node.attribute[..];
        for (i, a) in list.iter().enumerate() {
            if list[..i].iter().any(|b| b.name == a.name) {
                return Err(malformed(format!("{} has attribute {} twice", node.op_type, a.name)));
            }
            if !a.ref_attr_name.is_empty() {
                return Err(unsupported(format!("{} attribute {} refers to a function attribute", node.op_type, a.name)));
            }
        }
        Ok(Attrs { op: &node.op_type, list })
    }

    fn typed(&self, name: &str, want: i32) -> Result<Option<&'a pb::AttributeProto>, ReadError> {
        match self.list.iter().find(|a| a.name == name) {
            None => Ok(None),
            Some(a) if a.r#type == want || a.r#type == A_UNDEFINED => Ok(Some(a)),
            Some(a) => Err(malformed(format!(
                "{} attribute {name} has type {}, expected {}",
                self.op,
                type_name(a.r#type),
                type_name(want)
            ))),
        }
    }

    pub fn ints(&self, name: &str) -> Result<Option<&'a [i64]>, ReadError> {
        Ok(self.typed(name, A_INTS)?.map(|a| &a.ints[..]))
    }

    pub fn int(&self, name: &str) -> Result<Option<i64>, ReadError> {
        Ok(self.typed(name, A_INT)?.map(|a| a.i))
    }

    pub fn string(&self, name: &str) -> Result<Option<String>, ReadError> {
        match self.typed(name, A_STRING)? {
            None => Ok(None),
            Some(a) => Ok(Some(self.utf8(name, &a.s)?.to_string())),
        }
    }

    /// Borrowed: `nodes_modes` holds one string per node (a quarter of a million in a large
    /// forest), not worth copying.
    pub fn strings(&self, name: &str) -> Result<Option<Vec<&'a str>>, ReadError> {
        match self.typed(name, A_STRINGS)? {
            None => Ok(None),
            Some(a) => a.strings.iter().map(|s| self.utf8(name, s)).collect::<Result<Vec<_>, _>>().map(Some),
        }
    }

    fn utf8(&self, name: &str, bytes: &'a [u8]) -> Result<&'a str, ReadError> {
        std::str::from_utf8(bytes).map_err(|_| malformed(format!("{} attribute {name} is not UTF-8", self.op)))
    }

    /// `name` (FLOATS) or `name_as_tensor` (a FLOAT or DOUBLE tensor), widened to f64.
    pub fn reals(&self, name: &str) -> Result<Option<Vec<f64>>, ReadError> {
        let tensor_name = format!("{name}_as_tensor");
        let floats = self.typed(name, A_FLOATS)?;
        let tensor = self.typed(&tensor_name, A_TENSOR)?;
        match (floats, tensor) {
            (Some(_), Some(_)) => Err(malformed(format!("{} has both {name} and {tensor_name}", self.op))),
            (Some(a), None) => Ok(Some(a.floats.iter().map(|&v| f64::from(v)).collect())),
            (None, Some(a)) => match &a.t {
                Some(t) => tensor_reals(t, &tensor_name).map(Some),
                None => Err(malformed(format!("{} attribute {tensor_name} holds no tensor", self.op))),
            },
            (None, None) => Ok(None),
        }
    }
}

impl<'a> Attrs<'a> {
    fn tensor(&self, name: &str) -> Result<Option<&'a pb::TensorProto>, ReadError> {
        match self.typed(name, A_TENSOR)? {
            None => Ok(None),
            Some(a) => a.t.as_ref().map(Some).ok_or_else(|| malformed(format!("{} attribute {name} holds no tensor", self.op))),
        }
    }

    /// A TENSOR attribute of FLOAT or DOUBLE elements (opset 5's `nodes_splits`, ...), widened.
    pub fn tensor_reals(&self, name: &str) -> Result<Option<Vec<f64>>, ReadError> {
        self.tensor(name)?.map(|t| tensor_reals(t, name)).transpose()
    }

    /// A TENSOR attribute of UINT8 elements (opset 5's `nodes_modes`).
    pub fn tensor_u8(&self, name: &str) -> Result<Option<Vec<u8>>, ReadError> {
        let Some(t) = self.tensor(name)? else { return Ok(None) };
        if t.data_type != T_UINT8 {
            return Err(malformed(format!("{} attribute {name} has tensor element type #{} (expected UINT8)", self.op, t.data_type)));
        }
        if !t.raw_data.is_empty() {
            return Ok(Some(t.raw_data.clone()));
        }
        // UINT8 elements may also sit one per int32_data entry.
        t.int32_data
            .iter()
            .map(|&v| u8::try_from(v).map_err(|_| malformed(format!("{} attribute {name}: {v} is not a UINT8", self.op))))
            .collect::<Result<Vec<u8>, _>>()
            .map(Some)
    }
}

/// The elements of a FLOAT or DOUBLE tensor stored inside the model.
fn tensor_reals(t: &pb::TensorProto, what: &str) -> Result<Vec<f64>, ReadError> {
    if t.data_location == Some(1) || !t.external_data.is_empty() {
        return Err(unsupported(format!("{what} stored as external data")));
    }
    if t.segment.is_some() {
        return Err(unsupported(format!("{what} stored as a segmented tensor")));
    }
    let values: Vec<f64> = match t.data_type {
        T_FLOAT if !t.raw_data.is_empty() => {
            if !t.raw_data.len().is_multiple_of(4) {
                return Err(malformed(format!("{what}: raw FLOAT data of {} bytes", t.raw_data.len())));
            }
            t.raw_data
                .chunks_exact(4)
                .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect()
        }
        T_FLOAT => t.float_data.iter().map(|&v| f64::from(v)).collect(),
        T_DOUBLE if !t.raw_data.is_empty() => {
            if !t.raw_data.len().is_multiple_of(8) {
                return Err(malformed(format!("{what}: raw DOUBLE data of {} bytes", t.raw_data.len())));
            }
            t.raw_data
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect()
        }
        T_DOUBLE => t.double_data.clone(),
        other => return Err(unsupported(format!("{what} of tensor element type #{other} (expected FLOAT or DOUBLE)"))),
    };
    // The declared shape, when given, must hold exactly the stored elements.
    if !t.dims.is_empty() {
        let declared = t.dims.iter().try_fold(1u64, |acc, &d| u64::try_from(d).ok().and_then(|d| acc.checked_mul(d)));
        if declared != Some(values.len() as u64) {
            return Err(malformed(format!("{what}: shape {:?} does not match its {} elements", t.dims, values.len())));
        }
    }
    Ok(values)
}
